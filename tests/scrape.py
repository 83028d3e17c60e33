"""Reading a server's ``/metrics`` as Prometheus does: the exposition text, parsed by
prometheus_client's own parser, one value per series."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

PREFIX = "jupyter_gpu_pause_"


class Scrape:
    """One scrape: ``value(name, **labels)`` of a series, KeyError when the series is missing
    (a test that reads it proves it is exported)."""

    def __init__(self, text: str):
        self.text = text
        self.samples: dict[tuple[str, tuple], float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                self.samples[key] = sample.value

    def value(self, name: str, **labels) -> float:
        return self.samples[(PREFIX + name, tuple(sorted(labels.items())))]

    def moved(self, before: Scrape, name: str, **labels) -> float:
        """How much a series grew since ``before``."""
        return self.value(name, **labels) - before.value(name, **labels)

    def states(self) -> dict[str, float]:
        """Sessions by state."""
        return {
            dict(labels)["state"]: v
            for (name, labels), v in self.samples.items()
            if name == PREFIX + "sessions"
        }


async def scrape(lab) -> Scrape:
    """``GET /metrics`` of the test's server, with its token, as a Prometheus job would."""
    r = await lab.fetch("metrics")
    assert r.code == 200
    return Scrape(r.body.decode())
