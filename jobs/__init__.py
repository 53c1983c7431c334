"""The build job: typed config, fsspec storage and the Ray Data pipeline wiring chunking,
embedding and indexing together (the only package that imports Ray).

    from jobs.config import load_config
    from jobs.pipeline import run_job
    report = run_job(load_config("configs/local.yaml", overrides={"input": "docs/"}))

Command lines: `mdindex build ...` (jobs/build_cli.py) and `python -m jobs.reindex ...`.
Nothing is imported here so that `mdindex chunk` and `mdindex query` start without Ray.
"""
