"""The replay corpus (issue #33): real public notebooks, paused twice mid-way and continued, each
later cell compared with a run that never paused. ``corpus.py`` lists them, ``outputs.py``
reduces a cell's outputs to what a reader sees, ``run.py`` is the procedure."""
