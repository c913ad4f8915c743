"""The Debian package (packaging/deb/build.sh), built from a clean copy of the working tree, checked by
lintian, and installed for real into a throwaway root: a systemd-nspawn container booting this machine's
own root through a volatile overlay (--volatile=overlay), so dpkg can write anywhere and every write is gone
when the container stops. The host's dpkg database comes along, so the python3-* dependencies must be
installed on the host (apt-get install HOST_PACKAGES).

The clean copy is what a fresh clone of the tree would hold once committed: the tracked files and the
untracked ones git does not ignore (so no .venv, __pycache__ or dist/), copied from the working tree.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.container import Container, why_not
from tests.support.units import REPO
from tests.system.packaging.overlay_container import OverlayContainer
from watchdog import __version__

pytestmark = pytest.mark.slow

UNIT = "tpu-watchdog.service"
CONFIG = "/etc/tpu-watchdog/config.toml"
STATE_DIR = "/var/lib/tpu-watchdog"
DEB_DIR = "/srv/deb"  # where the container sees the built package
# The dependencies as Debian 12 names them (python3-tomli is only needed below Python 3.11).
HOST_PACKAGES = (
    "python3-requests",
    "python3-urllib3",
    "python3-psutil",
    "python3-systemd",
    "python3-prometheus-client",
)
# Lintian tags accepted (with --pedantic --display-info), and why. Any other tag fails the test.
ACCEPTED_LINTIAN = {
    # systemd only, on purpose: the daemon relies on sd_notify, the unit's watchdog and its sandbox.
    "package-supports-alternative-init-but-no-init.d-script",
}
# What dpkg, journald and the container's boot write on their own: not the package's leftovers.
BOOKKEEPING = re.compile(r"^/var/(lib/dpkg|log|cache|lib/systemd/(timers|random-seed|catalog))(/|$)")
SNAPSHOT_ROOTS = ("/etc", "/var", "/usr", "/opt", "/srv")


def _clean_copy(target: Path) -> Path:
    """The tree a fresh clone would hold: tracked + untracked-but-not-ignored files, from the working tree."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():  # a tracked file deleted in the working tree is not in a fresh clone either
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def _build(source: Path, out: Path) -> Path:
    done = subprocess.run(
        [str(source / "packaging" / "deb" / "build.sh"), str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("git") is None or shutil.which("dpkg-deb") is None:
        pytest.skip("needs git and dpkg-deb")
    return _clean_copy(tmp_path_factory.mktemp("src"))


@pytest.fixture(scope="module")
def deb(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(source, tmp_path_factory.mktemp("dist"))


def _members(deb: Path) -> dict[str, tarfile.TarInfo]:
    """The data archive's entries by path ('usr/bin/tpu-watchdog'), read with dpkg-deb."""
    data = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True).stdout
    out = deb.with_suffix(".data.tar")
    out.write_bytes(data)
    with tarfile.open(out) as archive:
        return {m.name.removeprefix("./").rstrip("/"): m for m in archive.getmembers()}


def _extract(deb: Path, into: Path) -> Path:
    subprocess.run(["dpkg-deb", "-x", str(deb), str(into)], check=True)
    subprocess.run(["dpkg-deb", "-e", str(deb), str(into / "DEBIAN")], check=True)
    return into


def test_the_package_holds_the_daemon_unit_config_and_docs(deb: Path, source: Path, tmp_path: Path) -> None:
    assert deb.name == f"tpu-watchdog_{__version__}_all.deb"
    fields = subprocess.run(
        ["dpkg-deb", "-f", str(deb), "Package", "Version", "Architecture", "Depends"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"Version: {__version__}\n" in fields
    assert "Architecture: all\n" in fields
    assert "python3-tomli" in fields  # Python 3.10 (Ubuntu 22.04) has no tomllib

    members = _members(deb)
    modules = sorted(p.relative_to(source).as_posix() for p in (source / "watchdog").rglob("*.py"))
    assert modules, "no watchdog/*.py in the clean copy"
    assert {f"usr/lib/tpu-watchdog/{m}" for m in modules} <= set(members)
    assert not [name for name in members if "__pycache__" in name or name.endswith(".pyc")]
    for path in (
        "usr/bin/tpu-watchdog",
        "lib/systemd/system/tpu-watchdog.service",
        "etc/tpu-watchdog/config.toml",
        "usr/share/doc/tpu-watchdog/copyright",
        "usr/share/doc/tpu-watchdog/changelog.gz",
        "usr/share/man/man1/tpu-watchdog.1.gz",
    ):
        assert path in members, path
        assert (members[path].uname, members[path].gname) == ("root", "root")
    assert members["usr/bin/tpu-watchdog"].mode == 0o755
    # Every reference page the README links to is on the host, beside the README.
    linked = set(re.findall(r"\(docs/([\w-]+\.md)\)", (source / "README.md").read_text()))
    assert linked, "the README links no docs/ page"
    assert {f"usr/share/doc/tpu-watchdog/docs/{page}.gz" for page in linked} <= set(members)

    tree = _extract(deb, tmp_path / "x")
    assert (tree / "DEBIAN" / "conffiles").read_text() == f"{CONFIG}\n"
    # Installed as they are in the tree, byte for byte.
    assert (tree / CONFIG.lstrip("/")).read_bytes() == (source / "examples" / "config.toml").read_bytes()
    shipped_unit = tree / "lib" / "systemd" / "system" / UNIT
    assert shipped_unit.read_bytes() == (source / "systemd" / UNIT).read_bytes()
    checked = subprocess.run(
        ["md5sum", "--check", "--quiet", str(tree / "DEBIAN" / "md5sums")],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_build_is_reproducible(deb: Path, source: Path, tmp_path: Path) -> None:
    again = _build(source, tmp_path)
    digest = [hashlib.sha256(path.read_bytes()).hexdigest() for path in (deb, again)]
    assert digest[0] == digest[1]


def test_the_build_refuses_a_version_the_changelog_does_not_have(source: Path, tmp_path: Path) -> None:
    bumped = _clean_copy(tmp_path / "src")
    init = bumped / "watchdog" / "__init__.py"
    init.write_text(init.read_text().replace(f'"{__version__}"', '"99.0.0"'))
    done = subprocess.run(
        [str(bumped / "packaging" / "deb" / "build.sh"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "add an entry for 99.0.0" in done.stderr
    assert not (tmp_path / "out").exists()


def test_lintian_finds_no_error(deb: Path) -> None:
    if shutil.which("lintian") is None:
        pytest.skip("lintian not installed (apt-get install lintian)")
    done = subprocess.run(
        ["lintian", "--pedantic", "--display-info", "--no-tag-display-limit", str(deb)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    tags = re.findall(r"^([EWIPX]): tpu-watchdog: (\S+)", done.stdout, re.M)
    assert not [tag for level, tag in tags if level == "E"], done.stdout
    assert {tag for _, tag in tags} <= ACCEPTED_LINTIAN, done.stdout
    assert done.returncode == 0, done.stdout + done.stderr


# -- installed for real --------------------------------------------------------------------------------


def _missing_host_packages() -> list[str]:
    return [
        name
        for name in HOST_PACKAGES
        if subprocess.run(["dpkg", "-s", name], capture_output=True, check=False).returncode != 0
    ]


@pytest.fixture(scope="module")
def container(deb: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Container]:
    reason = why_not()
    if reason:
        pytest.skip(reason)
    missing = _missing_host_packages()
    if missing:
        pytest.skip(f"the package's dependencies are not installed here: apt-get install {' '.join(missing)}")
    work = tmp_path_factory.mktemp("deb-nspawn")
    (work / "scratch").mkdir()
    box = OverlayContainer([(str(deb.parent), DEB_DIR)], work / "scratch", work / "console.log")
    try:
        # This machine's image forbids starting services from maintainer scripts (policy-rc.d exits 101, as
        # in Docker images), and deb-systemd-invoke obeys; a TPU VM has none. Gone from the overlay only.
        box.run("rm", "-f", "/usr/sbin/policy-rc.d")
        # Seconds per dpkg run re-indexing every manual page for one new page: not what is tested here.
        box.run("rm", "-f", "/var/lib/man-db/auto-update")
        yield box
    finally:
        box.close()


def snapshot(box: Container) -> set[str]:
    """Every path under SNAPSHOT_ROOTS in the container but dpkg's, journald's and the boot's own."""
    found = box.run("find", *SNAPSHOT_ROOTS, "-xdev", timeout=60).stdout.splitlines()
    return {path for path in found if not BOOKKEEPING.match(path)}


def show(box: Container, *properties: str, unit: str = UNIT) -> dict[str, str]:
    out = box.run("systemctl", "show", "-p", ",".join(properties), unit).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


# Where no systemd runs (an image built in a chroot, a container without an init), /run/systemd does not
# exist. A private mount namespace with an empty tmpfs over it hides the container's own.
WITHOUT_SYSTEMD = ("unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
                   'mount -t tmpfs -o mode=0755 none /run/systemd && exec "$@"', "sh")  # fmt: skip


def dpkg(box: Container, *args: str, systemd: bool = True) -> subprocess.CompletedProcess[str]:
    """dpkg in the container, stdin empty: a conffile question fails the run instead of hanging."""
    prefix = () if systemd else WITHOUT_SYSTEMD
    return box.run(*prefix, "dpkg", *args, timeout=120, stdin="")


def unit_log(box: Container) -> str:
    """Why the unit is where it is, for a failed assertion: its result and exit, and its journal's end."""
    result = show(box, "Result", "ExecMainCode", "ExecMainStatus")
    journal = box.run("journalctl", "--no-pager", "-o", "short-monotonic", "-n", "40", "-u", UNIT,
                      check=False)  # fmt: skip
    return f"{result}\n{journal.stdout}"


def package_file(deb: Path) -> str:
    return f"{DEB_DIR}/{deb.name}"


def test_install_starts_upgrade_restarts_and_keeps_the_config_purge_leaves_nothing(
    container: Container, deb: Path
) -> None:
    before = snapshot(container)
    dpkg(container, "--install", package_file(deb))
    try:
        # The CLI with the distribution's python3 and python3-* modules.
        version = container.run("tpu-watchdog", "--version").stdout.strip()
        assert version == f"tpu-watchdog {__version__}"
        container.run("systemd-run", "--unit=tpuwd-holder", "--property=StandardInput=file:/dev/full",
                      "/bin/sleep", "infinity")  # fmt: skip
        holder = show(container, "MainPID", unit="tpuwd-holder.service")["MainPID"]
        listed = container.run(
            "tpu-watchdog", "holders", "--device", "/dev/full", "--allow-number", "1:7", "--json"
        ).stdout
        assert int(holder) in {entry["pid"] for entry in json.loads(listed)}, listed

        # Known to systemd, enabled, started by postinst; the state directory made by the unit.
        state = show(container, "LoadState", "UnitFileState", "ActiveState", "FragmentPath", "MainPID")
        assert (state["LoadState"], state["UnitFileState"], state["ActiveState"]) == (
            "loaded",
            "enabled",
            "active",
        ), state
        assert state["FragmentPath"] in (f"/lib/systemd/system/{UNIT}", f"/usr/lib/systemd/system/{UNIT}")
        assert container.run("stat", "-c", "%a", STATE_DIR).stdout.strip() == "700"
        # With the man page installed: Documentation=man:tpu-watchdog(1) is checked by running man(1) on it.
        verify = container.run("systemd-analyze", "verify", state["FragmentPath"], check=False)
        assert (verify.returncode, verify.stderr.strip()) == (0, ""), verify.stderr

        # A drill's drain in the history (its holder dies of SIGTERM's default action: a verdict, no error).
        container.run(
            "tpu-watchdog",
            "drill",
            "--yes",
            "--device",
            "/dev/full",
            "--allow-number",
            "1:7",
            "--grace",
            "5",
            check=False,
        )
        [drilled] = json.loads(container.run("tpu-watchdog", "history", "--json").stdout)
        assert [p["pid"] for p in drilled["processes"]] == [int(holder)], drilled

        # Upgrade over itself: the local edit survives, no .dpkg-dist beside it, the daemon restarted.
        shipped = container.run("cat", CONFIG).stdout
        edited = shipped.replace('log_level = "info"', 'log_level = "debug"', 1)
        assert edited != shipped, "no top-level log_level line in the shipped config to edit"
        container.write(CONFIG, edited)
        dpkg(container, "--install", package_file(deb))
        assert container.run("cat", CONFIG).stdout == edited
        assert container.run("ls", "/etc/tpu-watchdog").stdout.split() == ["config.toml"]
        after = show(container, "ActiveState", "MainPID")
        assert after["ActiveState"] == "active"
        assert after["MainPID"] not in ("0", state["MainPID"]), (state, after)
        assert json.loads(container.run("tpu-watchdog", "history", "--json").stdout) == [drilled]  # kept

        # Remove: stopped, and it cannot start again (its file is gone and it is masked, until a reinstall or
        # the purge), the config kept.
        dpkg(container, "--remove", "tpu-watchdog")
        gone = show(container, "ActiveState", "UnitFileState")
        assert (gone["ActiveState"], gone["UnitFileState"]) == ("inactive", "masked"), unit_log(container)
        assert container.run("pgrep", "-f", "tpu-watchdog run", check=False).returncode == 1
        assert container.run("test", "-e", "/usr/lib/tpu-watchdog", check=False).returncode != 0
        assert container.run("cat", CONFIG).stdout == edited
    finally:
        container.run("systemctl", "stop", "tpuwd-holder.service", check=False)
        dpkg(container, "--purge", "tpu-watchdog")
    left = snapshot(container) - before
    assert sorted(left) == []
    assert show(container, "LoadState")["LoadState"] == "not-found"


def test_without_systemd_the_unit_is_enabled_for_next_boot_and_nothing_starts(
    container: Container, deb: Path
) -> None:
    # A unit left failed by an earlier test keeps that state through its purge: this test starts from none.
    container.run("systemctl", "reset-failed", UNIT, check=False)
    before = snapshot(container)
    installed = dpkg(container, "--install", package_file(deb), systemd=False)
    try:
        version = container.run("tpu-watchdog", "--version").stdout.strip()
        assert version == f"tpu-watchdog {__version__}"
        wants = f"/etc/systemd/system/multi-user.target.wants/{UNIT}"
        assert container.run("readlink", wants).stdout.strip().endswith(f"/systemd/system/{UNIT}")
        container.run("systemctl", "daemon-reload")
        state = show(container, "UnitFileState", "ActiveState")
        assert (state["UnitFileState"], state["ActiveState"]) == ("enabled", "inactive"), (
            state,
            installed,
            unit_log(container),
        )
        assert container.run("pgrep", "-f", "tpu-watchdog run", check=False).returncode == 1
    finally:
        dpkg(container, "--purge", "tpu-watchdog", systemd=False)
        container.run("systemctl", "daemon-reload")
    assert sorted(snapshot(container) - before) == []
