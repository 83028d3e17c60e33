"""Demo configuration for mybinder.org (copied to ~/.jupyter by postBuild).

Binder has no GPU, so the demo policy governs every Python kernel: it warns after 3 minutes
idle and pauses after 5, so a visitor sees the whole loop — warning, "Keep running", pause,
"Paused — Resume" — without waiting an hour. Checkpoints stay in the container's home.
"""

import os

c = get_config()  # noqa: F821 -- provided by the traitlets config loader

c.GpuPauseApp.store_url = os.path.expanduser("~/.gpu-pause/store")
c.GpuPauseApp.policies = [
    {
        "name": "binder-demo",
        "match": {"kernel_name": "python3"},
        "idle_timeout": 300,
        "warn_before": 120,
        "action": "pause",
        "max_keepalive": 1800,
    }
]
# Open the demo notebook first.
c.LabApp.default_url = "/lab/tree/demo/pause_and_resume.ipynb"
