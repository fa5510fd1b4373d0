"""The kbuild package from its installed wheel, on a machine without a GPU: explain for
simulated devices against the CLI, launch parameters, argument checks made before any driver
call, errors with the CLI's messages, bundles and pulls."""
import json
import shutil
import subprocess
import sys
import warnings

import pytest

import kbuild


class FakeDevice:
    def __init__(self, type, index):
        self.type = type
        self.index = index

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"


class FakeTensor:
    """What the binding reads of a torch tensor: data_ptr() and device."""

    def __init__(self, ptr=0x7F0000001000, device=("cuda", 0)):
        self._ptr = ptr
        self.device = FakeDevice(*device)

    def data_ptr(self):
        return self._ptr


class FakeTorchTensor(FakeTensor):
    """A tensor that also answers torch's quick questions: is_cuda and get_device()."""

    @property
    def is_cuda(self):
        return self.device.type == "cuda"

    def get_device(self):
        return -1 if self.device.index is None else self.device.index


def rmsnorm_args(rows=4, cols=4096):
    x, w, y = FakeTensor(), FakeTensor(), FakeTensor()
    return [x, w, y, rows, cols, 1e-6]


def test_import_needs_neither_torch_nor_a_gpu():
    code = "import sys, kbuild, kbuild.torch; assert 'torch' not in sys.modules; print(kbuild.__version__)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == kbuild.__version__
    # The installed wheel, not a source tree.
    assert "site-packages" in kbuild.__file__


@pytest.mark.parametrize("device", ["sm_90", "gfx1100", "sm_89", "gfx1030"])
def test_explain_is_the_clis_json(cli, build, device):
    pkg = kbuild.open(build)
    doc = pkg.explain(device=device)
    r = cli.run("explain", build, "--device", device, "--json", check=False)
    assert doc == json.loads(r.stdout)
    assert doc["schema"] == kbuild.EXPLAIN_SCHEMA == "kbuild.explain/v1"
    assert doc["device_info"]["simulated"] is True
    kernels = {k["kernel"]: k for k in doc["kernels"]}
    if device in ("sm_90", "gfx1100"):
        assert kernels["rmsnorm"]["selected"]["target"] == device
        assert r.returncode == 0
        # The text form is what `kbuild explain` prints.
        assert pkg.explain_text(device=device) == cli.run("explain", build, "--device", device).stdout
    else:
        assert kernels["rmsnorm"]["selected"] is None
        assert "hint: build it with `kbuild --targets" in kernels["rmsnorm"]["error"]
        assert r.returncode == 1


def test_explain_one_kernel_and_an_unknown_one(cli, build):
    pkg = kbuild.open(build)
    assert [k["kernel"] for k in pkg.explain("sm_90", kernel="rmsnorm")["kernels"]] == ["rmsnorm"]
    with pytest.raises(kbuild.KbuildError) as e:
        pkg.explain("sm_90", kernel="nope")
    assert str(e.value) == cli.error("explain", build, "--device", "sm_90", "--kernel", "nope")


def test_without_a_gpu_the_detected_device_is_a_clear_error(cli, build):
    pkg = kbuild.open(build)
    with pytest.raises(kbuild.NoDeviceError) as e:
        pkg.explain()
    assert str(e.value) == cli.error("explain", build)
    assert "no GPU found" in str(e.value)
    # The text form says so instead of raising; repr is one short line.
    assert "no GPU found" in str(pkg)
    assert repr(pkg) == f"<kbuild.Package kbuild-pyfixture 0.1.0 ({pkg.origin})>"
    with pytest.raises(kbuild.NoDeviceError):
        pkg.kernel("rmsnorm_f32")


def test_package_facts(build):
    pkg = kbuild.open(build)
    assert (pkg.name, pkg.version) == ("kbuild-pyfixture", "0.1.0")
    assert pkg.kernels == ["rmsnorm"]
    assert pkg.targets == ["sm_90", "gfx1100"]
    assert pkg.origin == str(build / "manifest.json")
    assert pkg.trust_note is None


def test_launch_params_are_visible(build):
    pkg = kbuild.open(build)
    cuda = pkg.params("rmsnorm_f32", device="sm_90")
    assert [(p["index"], p["offset"], p["size"]) for p in cuda] == [
        (0, 0, 8), (1, 8, 8), (2, 16, 8), (3, 24, 4), (4, 28, 4), (5, 32, 4)]
    assert [p["kind"] for p in cuda][3:] == ["value"] * 3
    amd = pkg.params("rmsnorm_f32", device="gfx1100")
    # The caller's six; the runtime's hidden arguments are left out.
    assert len(amd) == 6 and not any(p.get("hidden") for p in amd)
    assert [p["kind"] for p in amd] == ["pointer"] * 3 + ["value"] * 3
    assert [p["size"] for p in amd] == [8, 8, 8, 4, 4, 4]
    k = pkg.kernel("rmsnorm_f32", device="gfx1100")
    assert k.simulated and k.target == "gfx1100" and k.params == amd
    assert k.device_index is None
    assert "simulated" in repr(k)


def test_names_are_entries_or_kernels_with_one_entry(build):
    pkg = kbuild.open(build)
    assert pkg.kernel("rmsnorm_bf16", device="sm_90").kernel == "rmsnorm"
    with pytest.raises(kbuild.KbuildError, match="kernel `rmsnorm` has entries rmsnorm_bf16, rmsnorm_f32: name one of them"):
        pkg.kernel("rmsnorm", device="sm_90")
    with pytest.raises(kbuild.KbuildError, match=r"kernel `nope` is not in the manifest \(it has: rmsnorm\)"):
        pkg.kernel("nope", device="sm_90")


@pytest.mark.parametrize("device", ["sm_90", "gfx1100"])
def test_a_matching_launch_passes_the_checks(build, device):
    pkg = kbuild.open(build)
    pkg.check_launch("rmsnorm_f32", *rmsnorm_args(), device=device)
    pkg.check_launch("rmsnorm_f32", FakeTensor(), kbuild.Pointer(0x1000), 0x2000,
                     kbuild.int32(4), 4096, kbuild.float32(1e-6), device=device)


def test_a_mismatched_launch_is_refused_naming_the_argument(build):
    pkg = kbuild.open(build)

    def refused(*args, device="sm_90"):
        with pytest.raises(kbuild.LaunchError) as e:
            pkg.check_launch("rmsnorm_f32", *args, device=device)
        return str(e.value)

    x = FakeTensor()
    # A pointer where the kernel takes an int.
    assert refused(x, x, x, x, 4096, 1e-6) == "rmsnorm_f32: argument 3 is 8 bytes, the kernel takes 4 (value)"
    assert refused(x, x, x, kbuild.int64(4), 4096, 1e-6) == \
        "rmsnorm_f32: argument 3 is 8 bytes, the kernel takes 4 (value)"
    # hip-clang's metadata has no C types either: sizes and kinds decide.
    assert refused(x, x, x, x, 4096, 1e-6, device="gfx1100") == \
        "rmsnorm_f32: argument 3 is 8 bytes, the kernel takes 4 (value)"
    assert refused(x, x, x, 4, 4096) == "rmsnorm_f32: 5 arguments given, the kernel takes 6"
    assert refused(x, x, x, 2**31, 4096, 1e-6) == \
        "rmsnorm_f32: argument 3 is 2147483648, which does not fit in the kernel's 4 bytes (value)"
    assert refused(x, x, x, 4, 4096, "eps") == (
        "rmsnorm_f32: argument 5 is a str: pass a tensor, an int, a float, a kbuild.Pointer "
        "or a kbuild scalar (kbuild.int32(...))")
    assert refused(x, 1.5, x, 4, 4096, 1e-6, device="gfx1100").startswith(
        "rmsnorm_f32: argument 1 is a float, the kernel takes a pointer")
    cpu = FakeTensor(device=("cpu", None))
    assert refused(x, cpu, x, 4, 4096, 1e-6) == "rmsnorm_f32: argument 1 is a tensor on cpu, the kernel runs on a GPU"
    # torch's tensors are asked is_cuda and get_device() (no device object on the launch
    # path), with the same answers.
    t, t_cpu = FakeTorchTensor(device=("cuda", 1)), FakeTorchTensor(device=("cpu", None))
    assert refused(t, t_cpu, t, 4, 4096, 1e-6) == "rmsnorm_f32: argument 1 is a tensor on cpu, the kernel runs on a GPU"
    pkg.check_launch("rmsnorm_f32", t, t, t, 4, 4096, 1e-6, device="sm_90")


def test_c_types_and_names_sharpen_the_checks(build, tmp_path):
    # A manifest whose parameters have C types and names (AMDGPU .type_name / .name, a C++
    # kernel's demangled signature): an edited copy of the build's.
    m = json.loads((build / "manifest.json").read_text())
    names = ["x", "w", "y", "rows", "cols", "eps"]
    types = ["const float*", "const float*", "float*", "int", "int", "float"]
    for o in m["objects"]:
        for ps in o["params"].values():
            for p, n, t in zip([p for p in ps if not p.get("hidden")], names, types):
                p["name"], p["type"] = n, t
    (tmp_path / "manifest.json").write_text(json.dumps(m))
    pkg = kbuild.open(tmp_path / "manifest.json")
    x = FakeTensor()

    def refused(*args):
        with pytest.raises(kbuild.LaunchError) as e:
            pkg.check_launch("rmsnorm_f32", *args, device="sm_90")
        return str(e.value)

    assert refused(x, x, x, x, 4096, 1e-6) == "rmsnorm_f32: argument 3 is 8 bytes, the kernel takes 4 (int rows)"
    assert refused(x, x, x, 4.0, 4096, 1e-6) == "rmsnorm_f32: argument 3 is a float, the kernel takes an integer (int rows)"
    assert refused(x, x, x, 4, 4096, kbuild.int32(1)) == \
        "rmsnorm_f32: argument 5 is an int32_t, the kernel takes a floating-point value (float eps)"
    assert refused(x, x, x, 4, 4096, x) == "rmsnorm_f32: argument 5 is 8 bytes, the kernel takes 4 (float eps)"
    # An int into a float parameter is the float it names.
    pkg.check_launch("rmsnorm_f32", x, x, x, 4, 4096, 1, device="sm_90")
    assert pkg.params("rmsnorm_f32", device="gfx1100")[3] == {
        "index": 3, "offset": 24, "size": 4, "kind": "value", "name": "rows", "type": "int"}


def test_a_simulated_kernel_checks_then_refuses_to_launch(build):
    k = kbuild.open(build).kernel("rmsnorm_f32", device="sm_90")
    x = FakeTensor()
    # The argument check comes first: no driver is asked for anything.
    with pytest.raises(kbuild.LaunchError, match="argument 3 is 8 bytes, the kernel takes 4"):
        k.launch(4, 256, x, x, x, x, 4096, 1e-6)
    with pytest.raises(kbuild.SimulatedError, match="device sm_90 is simulated"):
        k.launch(4, 256, *rmsnorm_args())
    with pytest.raises(kbuild.LaunchError, match="grid must be an int or a tuple"):
        k.launch("4", 256, *rmsnorm_args())
    with pytest.raises(kbuild.SimulatedError):
        k.attributes
    k.check(*rmsnorm_args())


def test_a_kernel_nothing_runs_on_is_the_clis_no_match(cli, build):
    pkg = kbuild.open(build)
    with pytest.raises(kbuild.NoMatchError) as e:
        pkg.kernel("rmsnorm_f32", device="sm_80")
    assert isinstance(e.value, kbuild.KbuildError)
    assert str(e.value) == cli.error("explain", build, "--device", "sm_80")


def test_open_errors_carry_the_clis_message(cli, tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(kbuild.KbuildError) as e:
        kbuild.open(missing)
    assert str(e.value) == cli.error("explain", missing, "--device", "sm_90")
    bad = tmp_path / "manifest.json"
    bad.write_text('{"schema": "kbuild.manifest/v0"}')
    with pytest.raises(kbuild.KbuildError) as e:
        kbuild.open(bad)
    assert str(e.value) == cli.error("explain", bad, "--device", "sm_90")
    with pytest.raises(kbuild.KbuildError) as e:
        kbuild.open(bad.parent).explain("sm_9000")
    assert "manifest.json" in str(e.value)

def test_an_unknown_device_suggests_the_nearest(cli, build):
    with pytest.raises(kbuild.KbuildError) as e:
        kbuild.open(build).explain("sm_9000")
    # The CLI's flag parser says the same of its --device value.
    why = cli.error("explain", build, "--device", "sm_9000").split(": ", 1)[1]
    assert why == "unknown target `sm_9000` (did you mean sm_90?)"
    assert str(e.value) == f"device `sm_9000`: {why}"


def test_a_bundle_opens_and_explains(cli, bundle):
    with pytest.warns(kbuild.TrustWarning, match="not signed|no signature|unsigned"):
        pkg = kbuild.open(bundle)
    assert pkg.explain("gfx1100") == json.loads(cli.run("explain", bundle, "--device", "gfx1100", "--json").stdout)
    assert pkg.trust_note  # the default policy's note on an unsigned bundle
    assert pkg.params("rmsnorm_f32", device="sm_90")[3]["size"] == 4


def test_pull_fetches_verifies_and_caches(cli, bundle, tmp_path, monkeypatch):
    registry = tmp_path / "registry"
    for var, sub in (("KBUILD_CACHE_DIR", "cache"), ("KBUILD_DATA_DIR", "data"), ("KBUILD_CONFIG", "config")):
        monkeypatch.setenv(var, str(tmp_path / sub))
    env_cli = ["--registry", registry]
    cli.run("publish", bundle, *env_cli)
    with pytest.warns(kbuild.TrustWarning, match="it is not signed"):
        pkg = kbuild.pull("kbuild-pyfixture@0.1", registry=str(registry), device="gfx1100")
    assert (pkg.name, pkg.version) == ("kbuild-pyfixture", "0.1.0")
    assert pkg.explain("gfx1100")["kernels"][0]["selected"]["target"] == "gfx1100"
    # Only what the device runs was fetched: sm_90 has no object here.
    assert pkg.explain("sm_90")["kernels"][0]["selected"] is None
    assert pkg.kernel("rmsnorm_f32", device="gfx1100").target == "gfx1100"
    with pytest.warns(kbuild.TrustWarning):
        full = kbuild.pull("kbuild-pyfixture", registry=str(registry))
    assert full.explain("sm_90")["kernels"][0]["selected"]["target"] == "sm_90"
    with pytest.raises(kbuild.KbuildError, match="no version of kbuild-pyfixture .* matches"):
        kbuild.pull("kbuild-pyfixture@2", registry=str(registry))


def test_an_untrusted_signature_warns_as_the_cli_does(cli, bundle, tmp_path, monkeypatch):
    """Issue 26, class 7: a bundle signed by a key nobody trusts, under the default policy.
    The CLI warns on stderr; kbuild.pull and kbuild.open raise kbuild.TrustWarning with the
    same text (they used to say nothing unless pkg.trust_note was read)."""
    for var, sub in (("KBUILD_DATA_DIR", "data"), ("KBUILD_CONFIG", "config")):
        monkeypatch.setenv(var, str(tmp_path / sub))
    for var in ("KBUILD_SIGNATURE_POLICY", "KBUILD_TRUSTED_KEYS"):
        monkeypatch.delenv(var, raising=False)
    signed = tmp_path / bundle.name
    shutil.copy(bundle, signed)
    cli.run("keygen", "--out", tmp_path / "keys", "--name", "stranger")
    cli.run("sign", signed, "--key", tmp_path / "keys" / "stranger.key")
    registry = tmp_path / "registry"
    cli.run("publish", signed, "--registry", registry)

    monkeypatch.setenv("KBUILD_CACHE_DIR", str(tmp_path / "cache-py"))
    with pytest.warns(kbuild.TrustWarning) as caught:
        pkg = kbuild.pull("kbuild-pyfixture@0.1.0", registry=str(registry))
    monkeypatch.setenv("KBUILD_CACHE_DIR", str(tmp_path / "cache-cli"))
    r = cli.run("pull", "kbuild-pyfixture@0.1.0", "--registry", registry, cwd=tmp_path)
    (line,) = [l for l in r.stderr.splitlines() if l.startswith("warning: ")]
    said = line[len("warning: "):]
    assert "kbuild-pyfixture 0.1.0" in said, said
    assert [str(w.message) for w in caught] == [said]
    assert caught[0].filename == __file__  # points at the caller
    assert pkg.trust_note == said

    # Opening the bundle: `kbuild explain` prints `BUNDLE: MESSAGE`.
    r = cli.run("explain", signed, "--device", "gfx1100")
    (note,) = [l for l in r.stderr.splitlines() if l.startswith(f"{signed}: ")]
    with pytest.warns(kbuild.TrustWarning) as caught:
        kbuild.open(signed)
    assert [str(w.message) for w in caught] == [note]

    # The key trusted: no warning at all.
    monkeypatch.setenv("KBUILD_TRUSTED_KEYS", str(tmp_path / "keys" / "stranger.pub"))
    monkeypatch.setenv("KBUILD_CACHE_DIR", str(tmp_path / "cache-trusted"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", kbuild.TrustWarning)
        trusted = kbuild.pull("kbuild-pyfixture@0.1.0", registry=str(registry))
        kbuild.open(signed)
    assert trusted.trust_note.startswith("signed by trusted key")
    assert issubclass(kbuild.TrustWarning, UserWarning)


def test_scalars_and_pointers():
    assert repr(kbuild.int32(-3)) == "kbuild.int32(-3)"
    assert repr(kbuild.float64(0.5)) == "kbuild.float64(0.5)"
    assert kbuild.int64(1).size == 8 and kbuild.float32(1).ctype == "float"
    with pytest.raises(OverflowError):
        kbuild.int32(2**31)
    p = kbuild.Pointer(0xABC)
    assert int(p) == 0xABC and p == kbuild.Pointer(0xABC) and repr(p) == "kbuild.Pointer(0xabc)"


def test_torch_helpers_say_torch_is_needed(build):
    import kbuild.torch as kt
    try:
        import torch  # noqa: F401
        pytest.skip("torch is installed here")
    except ImportError:
        pass
    with pytest.raises(ImportError, match="kbuild.torch needs PyTorch"):
        kt.register_op(kbuild.open(build), "kbuild::rmsnorm", kernel="rmsnorm_f32")


def test_a_triton_kernel_launches_as_its_record_says_and_refuses_what_its_build_assumes(triton_build):
    pkg = kbuild.open(triton_build)
    k = pkg.kernel("add", device="sm_90a")
    assert k.target == "sm_90a"
    r = k.triton
    assert (r["num_warps"], r["warp_size"], r["shared"]) == (4, 32, 0)
    assert [p["name"] for p in r["params"]] == ["x_ptr", "y_ptr", "out_ptr", "n", "stride",
                                                 "global_scratch", "profile_scratch"]
    assert [p["name"] for p in k.params] == [p["name"] for p in r["params"]]
    # The five arguments the kernel takes pass every check; a simulated device then loads
    # nothing.
    with pytest.raises(kbuild.SimulatedError):
        k.launch_triton((4,), 0x1000, 0x2000, 0x3000, 4096, 1)
    with pytest.raises(kbuild.LaunchError, match=r"6 arguments given, the kernel takes 5 \(x_ptr, y_ptr, out_ptr, n, stride; compiled in, not passed: gk as None\)"):
        k.launch_triton((4,), 0x1000, 0x2000, 0x3000, 4096, 1, 7)
    with pytest.raises(kbuild.LaunchError, match=r"`x_ptr` \(\*fp32\): its address 0x1008 is not a multiple of 16"):
        k.launch_triton((4,), 0x1008, 0x2000, 0x3000, 4096, 1)
    with pytest.raises(kbuild.LaunchError, match=r"`n` \(i32\): its value 0x1001 is not a multiple of 16"):
        k.launch_triton((4,), 0x1000, 0x2000, 0x3000, 4097, 1)
    # A float where the kernel takes an int32_t: the loader's check names the parameter.
    with pytest.raises(kbuild.LaunchError, match=r"int32_t stride"):
        k.launch_triton((4,), 0x1000, 0x2000, 0x3000, 4096, 1.5)
    amd = pkg.kernel("add", device="gfx1100")
    assert amd.triton["warp_size"] == 32 and amd.target == "gfx1100"


def test_a_kernel_that_is_not_tritons_has_no_launch_record(build):
    k = kbuild.open(build).kernel("rmsnorm_f32", device="sm_90")
    assert k.triton is None
    with pytest.raises(kbuild.LaunchError, match="not a Triton kernel"):
        k.launch_triton((1,), 0)
