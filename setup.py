"""Build hook: ship the repository's templates, static files and migrations inside the wheel.

They stay at the top of the repository (the layout the stack documents, and what a checkout
runs from); a non-editable build copies them into ``llmjudge/_resources/``, which
``llmjudge.infra.config`` uses when the package is not running from a checkout.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
RESOURCES = ("templates", "static", "alembic", "alembic.ini")


class build_py_with_resources(build_py):  # noqa: N801 (setuptools command naming)
    def run(self) -> None:
        super().run()
        # Editable installs run from the checkout; nothing to copy.
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "llmjudge" / "_resources"
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        for name in RESOURCES:
            src = ROOT / name
            if src.is_dir():
                shutil.copytree(
                    src, target / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
                )
            else:
                shutil.copy2(src, target / name)


setup(cmdclass={"build_py": build_py_with_resources})
