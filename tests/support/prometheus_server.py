"""A real Prometheus server on loopback for tests: it scrapes the given targets every second as
job="tpu-watchdog", evaluates the given rule files every second, and is stopped with SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from tests.support.waiting import wait_for
from watchdog.fake.listen import hold_port

FIRST_SAMPLE_WITHIN = (
    30.0  # targets reach the scraper every 5 s: the first sample takes 5-6 s, more when busy
)


class PrometheusServer:
    def __init__(
        self, workdir: Path, targets: list[str], rule_files: list[Path], scrape_seconds: int = 1
    ) -> None:
        """`scrape_seconds`: the scrape interval and its timeout (a missed scrape makes a target's series
        stale at once, so a crowded target wants more than 1 s)."""
        workdir.mkdir()
        config = workdir / "prometheus.yml"
        config.write_text(
            f"global: {{scrape_interval: {scrape_seconds}s, scrape_timeout: {scrape_seconds}s,"
            " evaluation_interval: 1s}\n"
            f"rule_files: {json.dumps([str(path) for path in rule_files])}\n"
            "scrape_configs:\n"
            "  - job_name: tpu-watchdog\n"
            f"    static_configs: [{{targets: {json.dumps(targets)}}}]\n"
        )
        # Prometheus takes no port 0: it is told a free one, held until it stops (`reserved_port`).
        self._port = hold_port()
        self.address = f"127.0.0.1:{self._port.getsockname()[1]}"
        self.log_path = workdir / "prometheus.log"
        with self.log_path.open("w") as log:
            self.process = subprocess.Popen(
                ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={workdir / 'tsdb'}",
                 f"--web.listen-address={self.address}"],
                stdout=log, stderr=subprocess.STDOUT, cwd=workdir,
            )  # fmt: skip

    def log(self) -> str:
        return self.log_path.read_text()

    def api(self, path: str, **params: str) -> Any:
        """The `data` of an API answer; OSError while Prometheus is not listening yet."""
        if self.process.poll() is not None:
            raise AssertionError(f"prometheus exited {self.process.returncode}:\n{self.log()}")
        url = f"http://{self.address}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=5) as answer:
            body = json.loads(answer.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, promql: str, **params: str) -> list[dict[str, Any]]:
        """The result vector of an instant query (at `time=` if given); [] while Prometheus is not up."""
        try:
            result: list[dict[str, Any]] = self.api("query", query=promql, **params)["result"]
        except OSError:
            return []
        return result

    def value(self, promql: str) -> float | None:
        """The one value of an instant query; None while it has no result."""
        result = self.query(promql)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def wait_value(self, promql: str, expected: float) -> None:
        wait_for(
            lambda: self.value(promql) == expected,
            timeout=FIRST_SAMPLE_WITHIN,
            interval=0.2,
            what=f"{promql} == {expected} in Prometheus",
        )

    def rules(self) -> list[dict[str, Any]]:
        groups: list[dict[str, Any]] = self.api("rules")["groups"]
        return groups

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)
        finally:
            self._port.close()
