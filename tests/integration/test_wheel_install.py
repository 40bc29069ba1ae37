"""A non-editable install runs: the built wheel carries templates, static files and migrations.

Builds the wheel from this checkout, installs it (no dependencies) into a fresh virtual
environment that borrows the test interpreter's site-packages for the dependencies, and starts
`llmjudge serve --demo` from outside the repository, as a user of `pip install .` or `pipx`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import httpx
import pytest

from tests.conftest import ADMIN_TOKEN
from tests.integration.test_cli_serve import free_port, stop, wait_healthy

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def _run(*cmd: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    out = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, f"{cmd} failed:\n{out.stdout}\n{out.stderr}"
    return out.stdout


def test_wheel_installs_and_serves_the_demo(tmp_path: Path) -> None:
    # No PYTHONPATH=src: the checkout must not stand in for the installed package.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLMJUDGE_", "PYTHON"))}
    env["LLMJUDGE_ADMIN_TOKEN"] = ADMIN_TOKEN
    wheels = tmp_path / "wheels"
    _run(sys.executable, "-m", "pip", "wheel", REPO, "--no-deps", "-q", "-w", wheels, env=env)
    (wheel,) = wheels.glob("llmjudge-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in (
        "llmjudge/_resources/alembic.ini",
        "llmjudge/_resources/alembic/env.py",
        "llmjudge/_resources/alembic/versions/0001_catalog.py",
        "llmjudge/_resources/templates/base.html",
        "llmjudge/_resources/static/app.css",
        "llmjudge/demo/mtbench_demo.jsonl",
        "llmjudge/personas/templates/factual-qa.json",
    ):
        assert needed in names, f"{needed} missing from the wheel"

    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv)
    py = venv / "bin" / "python"
    _run(sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-deps", wheel, env=env)
    # Dependencies come from the test interpreter's environment, after the venv's own
    # site-packages: the installed wheel, not this checkout, provides `llmjudge`.
    site = Path(_run(py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip())
    (site / "zz_shared_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    root = _run(
        py, "-c", "import llmjudge.infra.config as c; print(c.PROJECT_ROOT)", cwd=outside, env=env
    )
    assert Path(root.strip()).is_relative_to(venv), root
    assert Path(root.strip()).name == "_resources"

    port = free_port()
    data = tmp_path / "data"
    proc = subprocess.Popen(
        [venv / "bin" / "llmjudge", "serve", "--demo", "--port", str(port), "--data-dir", data],
        cwd=outside,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        health = wait_healthy(port, proc, timeout=120)
        assert health["database"] == "ok"
        base = f"http://127.0.0.1:{port}"
        # Static files and templates come from the wheel; the migrations ran (the demo loaded).
        css = httpx.get(f"{base}/static/app.css", timeout=10)
        assert css.status_code == 200 and len(css.content) > 100
        auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        page = httpx.get(f"{base}/threads", headers=auth, timeout=10)
        assert page.status_code == 200 and "<html" in page.text.lower()
        threads = httpx.get(f"{base}/api/threads", headers=auth, timeout=10)
        assert threads.status_code == 200
    finally:
        stop(proc)
