"""Read models folded from the log (see ``readmodel.py`` for the key layout and queries).

``fold.fold`` is the pure fold; ``readmodel.Projector`` applies it to a ``kv.KV`` store in
atomic batches with the consumer offsets; ``runtime`` is the Kafka shell (``serve``,
``rebuild``); ``cli.register`` adds ``tickwheel projections [run|rebuild]``.
"""
