"""The HTTP gateway: ``app.build_app(settings, config, deps=None)``; routes in ``routes.py``.

``cli.register`` adds ``tickwheel gateway``; the job CLI is ``tickwheel.jobs_cli``.
"""
