"""The report page in a real browser: headless Chromium (Debian's package; tools/ci_env.sh installs
it) loads the page from a file, then a snippet run after load writes into the title how many
pictures decoded (naturalWidth > 0) out of how many there are, and how many table rows exist;
--dump-dom returns the DOM as the browser built it. In CI a missing Chromium fails the test;
elsewhere it is skipped."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from sglang_eagle3_ext import cli

DATA = Path(__file__).resolve().parents[1] / "docs" / "data"
SERVING = DATA / "h100-2026-12-07-r19" / "r15m"  # a scan and open-loop files: three pictures, four tables

PROBE = """<script>window.addEventListener("load", () => {
  const imgs = [...document.images];
  const ok = imgs.filter(i => i.complete && i.naturalWidth > 0 && i.naturalHeight > 0).length;
  document.title = `decoded ${ok}/${imgs.length} rows ${document.querySelectorAll("tbody tr").length}`;
});</script>"""


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        if shutil.which(name):
            return name
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail("chromium is not installed (tools/ci_env.sh installs Debian's package): the report page "
                    "must be checked in a real browser in CI")
    pytest.skip("chromium is not installed here (apt-get install chromium); CI runs this test")


def test_report_page_renders_in_headless_chromium(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    browser = _chromium()
    page = tmp_path / "report.html"
    assert cli.main(["report", str(SERVING), "--out", str(page)]) == 0
    capsys.readouterr()
    html = page.read_text(encoding="utf-8")
    probed = tmp_path / "probed.html"  # the page as written, plus the snippet before </body>
    probed.write_text(html.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    run = subprocess.run([browser, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
                          "--disable-extensions", f"--user-data-dir={tmp_path / 'profile'}",
                          "--virtual-time-budget=5000", "--dump-dom", probed.as_uri()],
                         capture_output=True, text=True, timeout=120, check=False)
    dom = run.stdout
    assert run.returncode == 0 and "<title>" in dom, run.stderr[-2000:]
    title = re.search(r"<title>(.*?)</title>", dom).group(1)
    m = re.fullmatch(r"decoded (\d+)/(\d+) rows (\d+)", title)
    assert m, title
    ok, total, rows = map(int, m.groups())
    assert total == html.count("<img ") == 3 and ok == total  # every picture decoded
    assert rows == html.count("<tr") - html.count("<thead><tr>") and rows > 40
    # the tables as the browser parsed them: the recorded configs' rows are there
    for label in ("ema-scan-moe", "policy-cal-moe", "static7-moe", "7 steps"):
        assert f"<td class=\"l\">{label}</td>" in dom, label


def test_ci_env_installs_chromium_once(tmp_path):
    """tools/ci_env.sh's Chromium step, run alone against stub apt-get / sudo: it installs
    Debian's chromium when none is on PATH, and does nothing when one is."""
    script = (Path(__file__).resolve().parents[1] / "tools" / "ci_env.sh").read_text()
    block = re.search(r"^if ! command -v chromium .*?^fi$", script, re.S | re.M)
    assert block, "tools/ci_env.sh lost its chromium step"
    stubs = tmp_path / "bin"
    stubs.mkdir()
    log = tmp_path / "calls"
    for name in ("apt-get", "sudo"):
        (stubs / name).write_text(f'#!/bin/sh\necho "{name} $*" >> {log}\n'
                                  + ('exec "$@"\n' if name == "sudo" else ""))
        (stubs / name).chmod(0o755)
    (stubs / "id").symlink_to(shutil.which("id"))
    env = {"PATH": str(stubs), "HOME": str(tmp_path)}
    bash = shutil.which("bash")
    subprocess.run([bash, "-euo", "pipefail", "-c", block.group(0)], env=env, check=True, timeout=30)
    calls = log.read_text().splitlines()
    assert [c for c in calls if c.startswith("apt-get")][-1] == "apt-get install -y -qq chromium", calls
    log.unlink()
    (stubs / "chromium").write_text("#!/bin/sh\n")
    (stubs / "chromium").chmod(0o755)
    subprocess.run([bash, "-euo", "pipefail", "-c", block.group(0)], env=env, check=True, timeout=30)
    assert not log.exists()  # already there: nothing installed
