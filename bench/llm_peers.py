"""The LLM section's peers, each in its own virtualenv under bench/.peers/ (made once, kept for reruns).

- transformers serve: the same transformers as Infera's (its pin) with the `serving` extras. The virtualenv reads
  Infera's site-packages after its own (a .pth), so torch is the same CPU build and is not downloaded again.
- llama-cpp-python's server: `llama-cpp-python[server]`, compiled from source here (minutes on 2 cores).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

from bench.servers import NotAvailable

BENCH_DIR = Path(__file__).resolve().parent
PEERS = BENCH_DIR / ".peers"
TRANSFORMERS_VENV = PEERS / "transformers-serve-venv"
LLAMA_VENV = PEERS / "llama-cpp-venv"
LLAMA_PIN = "llama-cpp-python[server]==0.3.36"
LLAMA_BUILD_LIMIT_S = 1500  # one try; past this the row says why it did not run
FAILED_MARK = "install-failed.txt"


def transformers_pin() -> str:
    import transformers

    return f"transformers[serving]=={transformers.__version__}"


def _make_venv(venv: Path, share_site_packages: bool) -> Path:
    python = venv / "bin" / "python"
    if not python.exists():
        venv.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    if share_site_packages:
        own = Path(
            subprocess.check_output(
                [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], text=True
            ).strip()
        )
        (own / "infera-site.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return python


def _install(venv: Path, requirement: str, probe: str, share: bool, limit_s: float) -> Path:
    """`requirement` installed into `venv` once; NotAvailable (and a mark that stops retries) when it fails."""
    python = venv / "bin" / "python"
    failed = venv / FAILED_MARK
    if failed.exists():
        raise NotAvailable(failed.read_text().strip())
    if python.exists() and subprocess.run([str(python), "-c", probe], capture_output=True).returncode == 0:
        return python
    python = _make_venv(venv, share)
    started = time.monotonic()
    try:
        done = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", requirement], capture_output=True, text=True, timeout=limit_s
        )
    except subprocess.TimeoutExpired:
        reason = f"pip install {requirement} ran past {limit_s:.0f} s"
        failed.write_text(reason + "\n")
        raise NotAvailable(reason) from None
    if done.returncode != 0:
        reason = (
            f"pip install {requirement} failed after {time.monotonic() - started:.0f} s: {done.stderr.strip()[-400:]}"
        )
        failed.write_text(reason + "\n")
        raise NotAvailable(reason)
    return python


def transformers_python() -> Path:
    """The interpreter of the transformers serve virtualenv, made when missing."""
    return _install(TRANSFORMERS_VENV, transformers_pin(), "import fastapi, uvicorn, transformers.cli", True, 900)


def llama_python() -> Path:
    """The interpreter of llama-cpp-python's virtualenv, built when missing (one try)."""
    if shutil.which("cmake") is None:
        raise NotAvailable("cmake is not installed: llama-cpp-python compiles llama.cpp at install")
    return _install(LLAMA_VENV, LLAMA_PIN, "import llama_cpp.server", False, LLAMA_BUILD_LIMIT_S)


if __name__ == "__main__":  # `python -m bench.llm_peers`: build both virtualenvs ahead of a run
    for build in (transformers_python, llama_python):
        try:
            print(build())
        except NotAvailable as reason:
            print(f"not available: {reason}")
