"""packaging/k8s: the manifests validate against Kubernetes 1.29's schemas offline, lint clean, and keep the
properties the watchdog depends on (host PID namespace, exactly three capabilities, probes that never take a
draining host's watchdog down, the state directory on the host). The image cannot be built here (no
container engine): the files it copies exist and the DaemonSet's command line passes the real config parser.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml")
kubernetes_validate = pytest.importorskip("kubernetes_validate")
yamllint_config = pytest.importorskip("yamllint.config")
yamllint_linter = pytest.importorskip("yamllint.linter")

REPO = Path(__file__).resolve().parents[3]
K8S = REPO / "packaging" / "k8s"
KUBERNETES_VERSION = "1.29.0"  # the oldest minor GKE still offers TPU node pools on, in extended support
# Not Kubernetes API kinds, so kubernetes-validate has no schema for them: the PodMonitor is a CRD of the
# Prometheus operator and the Kustomization is kustomize's own file. Both get structural tests below.
NOT_CORE = {"podmonitor.yaml", "kustomization.yaml"}
TPU_LABEL = "cloud.google.com/gke-tpu-accelerator"


def load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((K8S / name).read_text())
    assert isinstance(data, dict), name
    return data


def manifests() -> list[str]:
    return sorted(p.name for p in K8S.glob("*.yaml"))


@pytest.fixture(scope="module")
def daemonset() -> dict[str, Any]:
    return load("daemonset.yaml")


@pytest.fixture(scope="module")
def pod(daemonset: dict[str, Any]) -> dict[str, Any]:
    spec = daemonset["spec"]["template"]["spec"]
    assert isinstance(spec, dict)
    return spec


@pytest.fixture(scope="module")
def container(pod: dict[str, Any]) -> dict[str, Any]:
    (only,) = pod["containers"]
    assert isinstance(only, dict)
    return only


# -- schemas and lint -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(set(manifests()) - NOT_CORE))
def test_manifest_is_valid_kubernetes(name: str) -> None:
    kubernetes_validate.validate(load(name), KUBERNETES_VERSION, strict=True)


def test_the_schema_check_catches_a_misspelt_field(daemonset: dict[str, Any]) -> None:
    broken = copy.deepcopy(daemonset)
    broken["spec"]["template"]["spec"]["hostPid"] = True  # hostPID, misspelt: silently ignored by a lax check
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_every_yaml_file_is_lint_clean() -> None:
    config = yamllint_config.YamlLintConfig(file=str(REPO / ".yamllint"))
    problems = [
        f"{path.name}:{problem.line}:{problem.column} {problem.message} ({problem.rule})"
        for path in sorted(K8S.glob("*.yaml"))
        for problem in yamllint_linter.run(path.read_text(), config, str(path))
    ]
    assert problems == []


def test_kustomization_lists_every_manifest_once() -> None:
    kustomization = load("kustomization.yaml")
    assert kustomization["namespace"] == "tpu-watchdog"
    assert sorted(kustomization["resources"]) == sorted(set(manifests()) - {"kustomization.yaml"})
    for name in kustomization["resources"]:
        if name != "namespace.yaml":
            assert load(name)["metadata"]["namespace"] == "tpu-watchdog", name


def test_namespace_admits_the_pod_and_the_quota_unlocks_its_priority_class(pod: dict[str, Any]) -> None:
    labels = load("namespace.yaml")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"  # hostPID/hostPath fail "baseline"
    quota = load("resourcequota.yaml")["spec"]
    (scope,) = quota["scopeSelector"]["matchExpressions"]
    assert scope["scopeName"] == "PriorityClass"
    assert pod["priorityClassName"] in scope["values"]


# -- the DaemonSet's properties ---------------------------------------------------------------------------


def test_runs_only_on_tpu_nodes_and_tolerates_their_taint(pod: dict[str, Any]) -> None:
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    expressions = [e for term in terms["nodeSelectorTerms"] for e in term["matchExpressions"]]
    assert {"key": TPU_LABEL, "operator": "Exists"} in expressions
    assert any(
        t.get("key") == "google.com/tpu" and t.get("operator") == "Exists" and t.get("effect") == "NoSchedule"
        for t in pod["tolerations"]
    )
    assert pod["priorityClassName"] == "system-node-critical"


def test_sees_the_host_processes_with_three_capabilities_and_nothing_more(
    pod: dict[str, Any], container: dict[str, Any]
) -> None:
    assert pod["hostPID"] is True
    context = container["securityContext"]
    assert context["capabilities"]["drop"] == ["ALL"]
    assert sorted(context["capabilities"]["add"]) == ["DAC_READ_SEARCH", "KILL", "SYS_PTRACE"]
    assert context["privileged"] is False
    assert context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert context["runAsUser"] == 0
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False


def test_capabilities_are_the_systemd_units(container: dict[str, Any]) -> None:
    unit = (REPO / "systemd" / "tpu-watchdog.service").read_text()
    (line,) = re.findall(r"^CapabilityBoundingSet=(.*)$", unit, re.MULTILINE)
    assert sorted(c.removeprefix("CAP_") for c in line.split()) == sorted(
        container["securityContext"]["capabilities"]["add"]
    )


def test_probes_keep_a_draining_hosts_watchdog_running(container: dict[str, Any]) -> None:
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    # /readyz is 503 while a drain is pending: never a probe. A metadata outage fails /healthz, which a
    # restart cannot fix: liveness (and startup) look only at the main loop (/livez).
    paths = {"startupProbe": "/livez", "livenessProbe": "/livez", "readinessProbe": "/healthz"}
    for probe, path in paths.items():
        check = container[probe]["httpGet"]
        assert check["path"] == path, probe
        assert check["port"] in ports, probe
    assert ports["metrics"] == 9478


def test_state_directory_and_devices_come_from_the_host(
    pod: dict[str, Any], container: dict[str, Any]
) -> None:
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    state = volumes["state"]["hostPath"]
    assert state == {"path": "/var/lib/tpu-watchdog", "type": "DirectoryOrCreate"}
    assert f"--state-dir={mounts['state']['mountPath']}" in container["args"]
    assert volumes["host-dev"]["hostPath"]["path"] == "/dev"
    assert mounts["host-dev"]["readOnly"] is True
    devices = [a.split("=", 1)[1] for a in container["args"] if a.startswith("--device=")]
    assert devices
    assert all(d.startswith(mounts["host-dev"]["mountPath"] + "/") for d in devices)


def test_resources_cover_the_measured_idle_footprint(container: dict[str, Any]) -> None:
    resources = container["resources"]
    for kind in ("requests", "limits"):
        assert set(resources[kind]) == {"cpu", "memory"}, kind
    request_mib = mebibytes(resources["requests"]["memory"])
    assert mebibytes(resources["limits"]["memory"]) >= 2 * request_mib
    benchmarks = (REPO / "docs" / "benchmarks.md").read_text()
    idle = re.search(r"<!-- bench:idle -->(.*?)<!-- /bench:idle -->", benchmarks, re.S)
    if idle is None:
        pytest.skip("docs/benchmarks.md has no idle section yet")
    peaks = [float(mb) for mb in re.findall(r"\| ([\d.]+) MB:", idle.group(1))]
    assert peaks, "no peak RSS in the idle section"
    assert request_mib >= 1.5 * max(peaks) * 1e6 / 2**20


def test_stop_has_as_long_as_the_systemd_unit(pod: dict[str, Any]) -> None:
    unit = (REPO / "systemd" / "tpu-watchdog.service").read_text()
    (stop,) = re.findall(r"^TimeoutStopSec=(\d+)$", unit, re.MULTILINE)
    assert pod["terminationGracePeriodSeconds"] >= int(stop)


def test_the_command_line_is_accepted_by_the_daemons_config(
    container: dict[str, Any], tmp_path: Path
) -> None:
    """The container runs `tpu-watchdog ARGS`: ARGS must parse and say what the manifest assumes."""
    command, *flags = container["args"]
    assert command == "run"
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    shown = subprocess.run(
        [sys.executable, "-m", "watchdog", "config", "--json", "--config", str(empty), *flags],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    settings = json.loads(shown.stdout)["settings"]
    assert settings["listen"]["value"] == "0.0.0.0:9478"
    assert settings["metadata.host"]["value"] == "169.254.169.254"
    assert settings["devices.patterns"]["value"] == ["/host/dev/accel*", "/host/dev/vfio/*"]
    assert settings["state_dir"]["value"] == "/var/lib/tpu-watchdog"
    assert settings["dry_run"]["value"] is False


# -- the PodMonitor (a CRD) and the image recipe ------------------------------------------------------------


def test_podmonitor_scrapes_the_daemonset_as_the_rules_job(
    daemonset: dict[str, Any], container: dict[str, Any]
) -> None:
    monitor = load("podmonitor.yaml")
    assert (monitor["apiVersion"], monitor["kind"]) == ("monitoring.coreos.com/v1", "PodMonitor")
    spec = monitor["spec"]
    pod_labels = daemonset["spec"]["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= pod_labels.items()
    (endpoint,) = spec["podMetricsEndpoints"]
    assert endpoint["port"] in {p["name"] for p in container["ports"]}
    assert endpoint["path"] == "/metrics"
    # The alerts and recording rules select job="tpu-watchdog": the job name comes from this pod label.
    assert pod_labels[spec["jobLabel"]] == "tpu-watchdog"
    rules = (REPO / "packaging" / "prometheus" / "tpu-watchdog.rules.yml").read_text()
    assert 'job="tpu-watchdog"' in rules


def test_containerfile_copies_what_exists_and_runs_the_cli() -> None:
    text = (K8S / "Containerfile").read_text()
    sources = [
        source
        for line in text.splitlines()
        if line.startswith("COPY ") and "--from=" not in line
        for source in line.split()[1:-1]
    ]
    assert sources
    for source in sources:
        assert (REPO / source).exists(), source
    final_stage = text.rsplit("\nFROM ", 1)[1]
    assert "gcc" not in final_stage  # compilers stay in the build stage
    assert 'ENTRYPOINT ["tpu-watchdog"]' in final_stage
    assert re.search(r"^USER 0(:0)?$", final_stage, re.MULTILINE)


def mebibytes(quantity: str) -> float:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "K": 10**3, "M": 10**6, "G": 10**9}
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([KMG]i?)?", quantity)
    assert match, quantity
    return float(match.group(1)) * units.get(match.group(2) or "", 1) / 2**20
