"""A real build of kernels/rmsnorm.cu for sm_90 and gfx1100, made once per session with the
repository's kbuild (KBUILD_BIN; loader/python/test.sh sets it), and its bundle."""
import os
import pathlib
import shutil
import subprocess

import pytest

KBUILD_TOML = """\
[package]
name = "kbuild-pyfixture"
version = "0.1.0"

[build]
targets = ["sm_90", "gfx1100"]

[kernels.rmsnorm]
source = "rmsnorm.cu"
entries = ["rmsnorm_f32", "rmsnorm_bf16"]
block-size = 256
"""


def _env():
    env = dict(os.environ)
    env.pop("KBUILD_DEVICE", None)
    return env


@pytest.fixture(autouse=True)
def _no_simulated_device_from_env(monkeypatch):
    monkeypatch.delenv("KBUILD_DEVICE", raising=False)


class Cli:
    """The kbuild binary, for the CLI's answers the package must give too."""

    def __init__(self, path):
        self.path = path

    def run(self, *args, check=True, cwd=None):
        r = subprocess.run([self.path, *map(str, args)], capture_output=True, text=True,
                           env=_env(), cwd=cwd)
        if check and r.returncode != 0:
            raise AssertionError(f"kbuild {' '.join(map(str, args))}: exit {r.returncode}\n{r.stderr}")
        return r

    def error(self, *args):
        """The CLI's `error: ` message of a failing command."""
        r = self.run(*args, check=False)
        assert r.returncode != 0, r.stdout
        lines = [l for l in r.stderr.splitlines() if l.startswith("error: ")]
        assert lines, r.stderr
        return lines[-1][len("error: "):]


@pytest.fixture(scope="session")
def cli():
    path = os.environ.get("KBUILD_BIN") or shutil.which("kbuild")
    if os.environ.get("KBUILD_BIN") and not os.path.isfile(path):
        pytest.fail(f"KBUILD_BIN={path} is not a file")
    if not path:
        pytest.skip("no kbuild binary (set KBUILD_BIN; loader/python/test.sh does)")
    return Cli(path)


@pytest.fixture(scope="session")
def build(cli, tmp_path_factory):
    repo = pathlib.Path(os.environ.get("KBUILD_REPO", pathlib.Path(__file__).resolve().parents[3]))
    project = tmp_path_factory.mktemp("project")
    shutil.copy(repo / "kernels" / "rmsnorm.cu", project / "rmsnorm.cu")
    (project / "Kbuild.toml").write_text(KBUILD_TOML)
    out = project / "out"
    cli.run("build", "--manifest-path", project / "Kbuild.toml", "--out", out)
    return out


@pytest.fixture(scope="session")
def bundle(cli, build, tmp_path_factory):
    dest = tmp_path_factory.mktemp("bundles")
    cli.run("package", build, "--out", dest)
    (found,) = dest.glob("*.kbundle")
    return found


TRITON_TOML = """\
[package]
name = "kbuild-pytriton"
version = "0.1.0"

[build]
targets = ["sm_90a", "gfx1100"]

[kernels.add]
language = "triton"
source = "kern.py"
function = "add_kernel"
signature = { x_ptr = "*fp32", y_ptr = "*fp32", out_ptr = "*fp32", n = "i32", stride = "i32", gk = "None" }
constexprs = { BLOCK = 1024 }
divisible-16 = ["x_ptr", "y_ptr", "out_ptr", "n"]
"""


@pytest.fixture(scope="session")
def triton_build(cli, tmp_path_factory):
    """A Triton kernel (the end-to-end tests' kern.py) built by kbuild's Triton workers."""
    repo = pathlib.Path(os.environ.get("KBUILD_REPO", pathlib.Path(__file__).resolve().parents[3]))
    project = tmp_path_factory.mktemp("triton")
    shutil.copy(repo / "tests" / "tests" / "triton" / "kern.py", project / "kern.py")
    (project / "Kbuild.toml").write_text(TRITON_TOML)
    out = project / "out"
    cli.run("toolchain", "install", "triton")
    cli.run("build", "--manifest-path", project / "Kbuild.toml", "--out", out)
    return out
