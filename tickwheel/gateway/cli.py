"""``tickwheel gateway``: serve the HTTP API (and the read model it answers from)."""

from __future__ import annotations

import argparse
from typing import Any

from tickwheel.settings import load


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("gateway", help="serve the HTTP API, /ui and /metrics")
    parser.add_argument("--host", default=None, help="listen address (default $TICKWHEEL_GATEWAY_HOST)")
    parser.add_argument(
        "--port", type=int, default=None, help="listen port (default $TICKWHEEL_GATEWAY_PORT)"
    )
    parser.add_argument(
        "--read-model",
        choices=("embedded", "secondary"),
        default=None,
        help="embedded: fold the log in this process (default); secondary: read the store that "
        "`tickwheel projections` writes",
    )
    parser.set_defaults(func=_cli)


def _cli(args: argparse.Namespace) -> int:
    from aiohttp import web

    from tickwheel.cli import CliError
    from tickwheel.gateway.app import build_app, load_tokens
    from tickwheel.gateway.auth import TokenError
    from tickwheel.gateway.config import GatewayConfig
    from tickwheel.logs import configure_logging

    configure_logging()
    settings = load()
    config = GatewayConfig()
    if args.read_model is not None:
        config = config.model_copy(update={"read_model": args.read_model})
    try:
        tokens = load_tokens(settings, config)
    except TokenError as exc:
        raise CliError(str(exc), 2) from exc
    if not len(tokens):
        raise CliError(
            "no API tokens: set TICKWHEEL_TOKENS_FILE, TICKWHEEL_GATEWAY_TOKENS or TICKWHEEL_TOKEN", 2
        )
    app = build_app(settings, config, tokens=tokens)
    host = args.host or settings.gateway_host
    port = args.port or settings.gateway_port
    print(f"tickwheel gateway on http://{host}:{port} (read model: {config.read_model})", flush=True)
    web.run_app(app, host=host, port=port, print=None, access_log=None)
    return 0
