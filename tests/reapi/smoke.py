#!/usr/bin/env python3
"""TEST FIXTURE self-check: BuildGrid + PostgreSQL + one host-tools worker, end to end.

  smoke.py [--dir DIR] [--keep]

Starts serve.py with one worker in a fresh DIR (default: a new temp dir, removed afterwards unless --keep),
then, speaking REAPI v2 with the Python stubs shipped in buildgrid:
  1. runs `/bin/sh -c 'echo hi > out.txt'` and checks the ActionResult and the output bytes;
  2. runs `cc -c add.c -o add.o` (if cc exists) and checks add.o is byte-identical to a local `cc -c`;
  3. runs 1. again and checks cached_result;
  4. checks an action needing a platform property no worker has stays QUEUED (client deadline, then
     CancelOperation), and that an unregistered property key is refused at once;
  5. runs `sleep 30`, checks that a second Execute of it joins the running job (dedup), SIGKILLs the worker
     mid-action and records when BuildGrid requeues it; starts a replacement worker, SIGTERMs that one
     mid-action (it must hand the lease back at once), and lets a third worker finish the action.
Prints a timing table and exits non-zero on the first failed check. Needs tests/reapi/install.sh.
"""
import argparse, hashlib, json, os, random, select, shutil, signal, subprocess, sys, tempfile, threading, time, uuid

HERE = os.path.dirname(os.path.abspath(__file__))
VENV = os.environ.get("KBUILD_REAPI_VENV",
                      os.path.expanduser("~/.local/share/kbuild/reapi/buildgrid-0.9.1-venv"))
VPY = os.path.join(VENV, "bin", "python")
if not os.access(VPY, os.X_OK):
    sys.exit(f"smoke.py: no venv at {VENV}: run tests/reapi/install.sh first")
if os.path.realpath(sys.prefix) != os.path.realpath(VENV):  # re-run under the venv's Python
    os.execv(VPY, [VPY, os.path.abspath(__file__)] + sys.argv[1:])

import grpc
from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from buildgrid._protos.google.bytestream import bytestream_pb2, bytestream_pb2_grpc
from buildgrid._protos.google.longrunning import operations_pb2, operations_pb2_grpc

STAGE = re_pb2.ExecutionStage.Value.Value
BIG, CHUNK = 1 << 20, 1 << 20  # blobs from 1 MiB go over ByteStream in this client
C_SOURCE = b"int add(int a, int b) { return a + b; }\nint twice(int x) { return add(x, x); }\n"
timings = []


def step(msg):
    print(f"[smoke {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def digest(data):
    return re_pb2.Digest(hash=hashlib.sha256(data).hexdigest(), size_bytes=len(data))


class Client:
    def __init__(self, remote, instance):
        self.channel = grpc.insecure_channel(remote.removeprefix("grpc://"))
        self.instance = instance
        self.cas = re_grpc.ContentAddressableStorageStub(self.channel)
        self.exe = re_grpc.ExecutionStub(self.channel)
        self.ops = operations_pb2_grpc.OperationsStub(self.channel)
        self.bs = bytestream_pb2_grpc.ByteStreamStub(self.channel)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.channel.close()

    def upload(self, blobs):
        """Small blobs in one BatchUpdateBlobs (tests keep them far below 4 MiB), big ones over ByteStream."""
        small = [b for b in blobs if len(b) < BIG]
        for b in blobs:
            if len(b) >= BIG:
                d = digest(b)
                name = f"{self.instance}/uploads/{uuid.uuid4()}/blobs/{d.hash}/{d.size_bytes}"
                self.bs.Write((bytestream_pb2.WriteRequest(resource_name=name, write_offset=o, data=b[o:o + CHUNK],
                                                           finish_write=o + CHUNK >= len(b))
                               for o in range(0, len(b), CHUNK)), timeout=60)
        req = re_pb2.BatchUpdateBlobsRequest(instance_name=self.instance, requests=[
            re_pb2.BatchUpdateBlobsRequest.Request(digest=digest(b), data=b) for b in small])
        for r in self.cas.BatchUpdateBlobs(req, timeout=30).responses:
            check(r.status.code == 0, f"upload failed: {r.status}")

    def read(self, d):
        if d.size_bytes == 0:
            return b""
        if d.size_bytes >= BIG:
            name = f"{self.instance}/blobs/{d.hash}/{d.size_bytes}"
            return b"".join(r.data for r in self.bs.Read(bytestream_pb2.ReadRequest(resource_name=name), timeout=60))
        resp = self.cas.BatchReadBlobs(re_pb2.BatchReadBlobsRequest(instance_name=self.instance, digests=[d]),
                                       timeout=30)
        return resp.responses[0].data

    def action(self, argv, files=None, outputs=(), platform=None, timeout_s=None, env=None):
        """Upload an action (flat input root) and return its digest."""
        files = files or {}
        fnodes = [re_pb2.FileNode(name=n, digest=digest(b)) for n, b in sorted(files.items())]
        root = re_pb2.Directory(files=fnodes).SerializeToString()
        plat = re_pb2.Platform(properties=[re_pb2.Platform.Property(name=k, value=v)
                                           for k, v in sorted((platform or {}).items())])
        env = env or {"PATH": "/usr/bin:/bin"}
        cmd = re_pb2.Command(arguments=argv, output_paths=sorted(outputs), platform=plat,
                             environment_variables=[re_pb2.Command.EnvironmentVariable(name=k, value=v)
                                                    for k, v in sorted(env.items())]).SerializeToString()
        act = re_pb2.Action(command_digest=digest(cmd), input_root_digest=digest(root), platform=plat)
        if timeout_s:
            act.timeout.seconds = timeout_s
        act = act.SerializeToString()
        self.upload([cmd, root, act] + list(files.values()))
        return digest(act)

    def execute(self, action_digest, deadline=120, on_update=None):
        """Execute and follow the stream. Returns (ExecuteResponse or None, last Operation, seconds)."""
        t0 = time.time()
        last = None
        stream = self.exe.Execute(re_pb2.ExecuteRequest(instance_name=self.instance, action_digest=action_digest),
                                  timeout=deadline)
        try:
            for op in stream:
                last = op
                if on_update:
                    on_update(op)
                if op.done:
                    check(not op.HasField("error"), f"Execute failed: {op.error}")
                    resp = re_pb2.ExecuteResponse()
                    op.response.Unpack(resp)
                    return resp, op, time.time() - t0
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                raise
        return None, last, time.time() - t0


def stage_of(op):
    md = re_pb2.ExecuteOperationMetadata()
    op.metadata.Unpack(md)
    return md.stage


def start_serve(d, extra=()):
    serve = subprocess.Popen([VPY, os.path.join(HERE, "serve.py"), d, "--workers", "1", *extra],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    r, _, _ = select.select([serve.stdout], [], [], 180)
    line = serve.stdout.readline() if r else ""
    if not line:
        serve.kill() if serve.poll() is None else None
        raise AssertionError(f"serve.py did not print its JSON line (exit code {serve.wait()})")
    return serve, json.loads(line)


def start_worker(info, name):
    logf = open(os.path.join(info["dir"], f"{name}.log"), "ab")
    p = subprocess.Popen([VPY, os.path.join(HERE, "worker.py"), "--remote", info["remote"], "--instance",
                          info["instance"], "--name", name, "--work-dir", os.path.join(info["dir"], f"work-{name}"),
                          "--property", "OSFamily=linux", "--property", f"ISA={os.uname().machine.replace('_', '-')}"],
                         stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    logf.close()
    return p


def procs_under(path):
    """pids whose cwd is under path (orphaned action processes would show up here)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/cwd").startswith(path):
                out.append(int(pid))
        except OSError:
            pass
    return out


def run_checks(info):
    with Client(info["remote"], info["instance"]) as c:
        _run_checks(c, info)


def _run_checks(c, info):
    linux = {"OSFamily": "linux"}

    step("1. /bin/sh -c 'echo hi > out.txt'")
    echo = c.action(["/bin/sh", "-c", "echo hi > out.txt"], outputs=["out.txt"], platform=linux)
    resp, _, secs = c.execute(echo)
    check(resp is not None and resp.status.code == 0, f"echo action failed: {resp}")
    res = resp.result
    check(res.exit_code == 0, f"exit code {res.exit_code}, stderr {c.read(res.stderr_digest)!r}")
    check(not resp.cached_result, "the first run of the echo action came from the cache")
    check([f.path for f in res.output_files] == ["out.txt"], f"outputs: {res.output_files}")
    check(c.read(res.output_files[0].digest) == b"hi\n", "out.txt content")
    check(res.execution_metadata.worker == info["workers"][0], f"worker name: {res.execution_metadata.worker}")
    timings.append(("action round trip (echo, cold)", secs))

    cc = shutil.which("cc")
    if cc:
        step(f"2. {cc} -c add.c -o add.o, compared with a local compile")
        act = c.action([cc, "-c", "add.c", "-o", "add.o"], files={"add.c": C_SOURCE}, outputs=["add.o"],
                       platform=linux)
        resp, _, secs = c.execute(act)
        check(resp is not None and resp.status.code == 0 and resp.result.exit_code == 0,
              f"cc action failed: {resp} stderr={c.read(resp.result.stderr_digest) if resp else ''}")
        remote_obj = c.read(resp.result.output_files[0].digest)
        with tempfile.TemporaryDirectory() as t:
            with open(os.path.join(t, "add.c"), "wb") as f:
                f.write(C_SOURCE)
            subprocess.run([cc, "-c", "add.c", "-o", "add.o"], cwd=t, check=True, env={"PATH": "/usr/bin:/bin"})
            local_obj = open(os.path.join(t, "add.o"), "rb").read()
        check(remote_obj == local_obj, "remote add.o differs from the local one")
        step(f"   add.o identical ({len(remote_obj)} bytes, sha256 {hashlib.sha256(remote_obj).hexdigest()[:12]})")
        timings.append(("action round trip (cc -c)", secs))
    else:
        step("2. skipped: no cc on PATH")

    step("3. the echo action again: must be an ActionCache hit")
    resp, _, secs = c.execute(echo)
    check(resp is not None and resp.cached_result, f"expected cached_result: {resp}")
    timings.append(("cache hit (Execute)", secs))

    step("3b. Action.timeout: sleep 20 with a 1 s timeout must end DEADLINE_EXCEEDED")
    slow = c.action(["/bin/sleep", "20"], platform=linux, timeout_s=1)
    resp, _, secs = c.execute(slow, deadline=30)
    check(resp is not None and resp.status.code == 4, f"expected DEADLINE_EXCEEDED (4), got {resp and resp.status}")
    step(f"   killed by the worker: status DEADLINE_EXCEEDED after {secs:.1f} s")
    timings.append(("action timeout 1 s (sleep 20)", secs))

    step("3c. 6 MiB input and output: ByteStream both ways (over the 4 MiB batch limit)")
    big = random.Random(29).randbytes(6 << 20)
    act = c.action(["/bin/sh", "-c", "cp big.bin copy.bin && sha256sum big.bin > sum.txt"],
                   files={"big.bin": big}, outputs=["copy.bin", "sum.txt"], platform=linux)
    resp, _, secs = c.execute(act)
    check(resp is not None and resp.status.code == 0 and resp.result.exit_code == 0, f"big action: {resp}")
    outs = {f.path: f for f in resp.result.output_files}
    check(c.read(outs["copy.bin"].digest) == big, "copy.bin differs")
    check(c.read(outs["sum.txt"].digest).split()[0].decode() == hashlib.sha256(big).hexdigest(), "sum.txt")
    timings.append(("6 MiB in + 6 MiB out round trip", secs))

    step("4. platform nobody advertises: must stay queued")
    nobody = c.action(["/bin/true"], platform={"OSFamily": "linux", "kbuild-toolchain": "no-such-toolchain"})
    resp, op, secs = c.execute(nobody, deadline=6)
    check(resp is None and op is not None and stage_of(op) == STAGE("QUEUED"),
          f"expected still QUEUED after the deadline, got {op}")
    step(f"   not run: still QUEUED after {secs:.1f} s (client deadline); cancelling {op.name}")
    c.ops.CancelOperation(operations_pb2.CancelOperationRequest(name=op.name), timeout=10)
    try:
        c.execute(c.action(["/bin/true"], platform={"no-such-key": "x"}), deadline=10)
        raise AssertionError("an unregistered property key was accepted")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.FAILED_PRECONDITION, f"unregistered key: {e.code()}")
        step(f"   unregistered key refused at once: {e.code().name}")

    step("5. sleep 30: dedup, then SIGKILL the worker mid-action")
    sleep = c.action(["/bin/sleep", "30"], platform=linux)
    seen = []  # (seconds since start, stage) of the first Execute's stream
    t0 = time.time()
    box = {}

    def first():
        box["r"] = c.execute(sleep, deadline=240, on_update=lambda op: seen.append((time.time() - t0, stage_of(op))))
    th = threading.Thread(target=first, daemon=True)
    th.start()
    wait_for(lambda: any(s == STAGE("EXECUTING") for _, s in seen), 30, "sleep action to start executing")
    # A second Execute of the same digest: BuildGrid attaches it to the in-flight job (dedup).
    _, op2, _ = c.execute(sleep, deadline=2)
    check(op2 is not None and stage_of(op2) == STAGE("EXECUTING"), f"second Execute not deduplicated: {op2}")
    step("   a second Execute of the same action joined the running job (stage EXECUTING at once)")
    wpid = info["pids"]["workers"][0]
    work0 = os.path.join(info["dir"], "work-0")
    time.sleep(1)
    check(procs_under(work0), "no action process found under work-0")
    os.kill(wpid, signal.SIGKILL)
    t_kill = time.time()
    step(f"   SIGKILLed worker pid {wpid}")
    wait_for(lambda: not procs_under(work0), 5, "the action's processes to die with the worker")
    step("   the action's process died with the worker (no orphan)")
    wait_for(lambda: any(s == STAGE("QUEUED") and t > t_kill - t0 for t, s in seen), 60, "requeue after SIGKILL")
    requeue = next(t for t, s in seen if s == STAGE("QUEUED") and t > t_kill - t0) - (t_kill - t0)
    step(f"   BuildGrid requeued the job {requeue:.1f} s after the kill (keepalive timeout + reaper)")
    timings.append(("requeue after worker SIGKILL", requeue))

    w2 = start_worker(info, "replacement-1")
    n_exec = len([1 for _, s in seen if s == STAGE("EXECUTING")])
    wait_for(lambda: len([1 for _, s in seen if s == STAGE("EXECUTING")]) > n_exec, 30, "replacement to take the job")
    time.sleep(1)
    w2.send_signal(signal.SIGTERM)
    t_term = time.time()
    check(w2.wait(15) == 0, "replacement worker did not exit cleanly on SIGTERM")
    wait_for(lambda: any(s == STAGE("QUEUED") and t > t_term - t0 for t, s in seen), 30, "requeue after SIGTERM")
    requeue = next(t for t, s in seen if s == STAGE("QUEUED") and t > t_term - t0) - (t_term - t0)
    step(f"   SIGTERMed replacement handed the lease back; requeued {requeue:.1f} s after the signal")
    timings.append(("requeue after worker SIGTERM", requeue))

    w3 = start_worker(info, "replacement-2")
    th.join(200)
    w3.send_signal(signal.SIGTERM)
    w3.wait(15)
    resp, _, secs = box.get("r", (None, None, 0))
    check(resp is not None and resp.status.code == 0 and resp.result.exit_code == 0, f"sleep action: {resp}")
    check(resp.result.execution_metadata.worker == "replacement-2", f"ran on {resp.result.execution_metadata.worker}")
    step(f"   sleep 30 completed on replacement-2; first Execute stream lasted {secs:.1f} s")
    timings.append(("sleep 30 end to end incl. 2 worker losses", secs))


def wait_for(pred, timeout, what):
    end = time.time() + timeout
    while not pred():
        if time.time() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


def main():
    ap = argparse.ArgumentParser(description="REAPI fixture self-check")
    ap.add_argument("--dir", help="fresh directory for the farm (default: a new temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep DIR (logs) afterwards")
    args = ap.parse_args()
    d = os.path.abspath(args.dir) if args.dir else tempfile.mkdtemp(prefix="kbuild-reapi-smoke-")
    t0 = time.time()
    step(f"starting serve.py in {d}")
    try:
        serve, info = start_serve(d)
    except AssertionError as e:
        sys.exit(f"smoke.py: FAILED: {e}\n(logs in {d})")
    timings.append(("farm ready (PostgreSQL + server + worker)", time.time() - t0))
    for k, v in info["startup_s"].items():
        timings.append((f"  of which {k}", v))
    ok = False
    try:
        run_checks(info)
        ok = True
    except AssertionError as e:
        print(f"smoke.py: FAILED: {e}\n(logs in {d})", file=sys.stderr)
    finally:
        t1 = time.time()
        serve.stdin.close()
        rc = serve.wait(90)
        timings.append(("teardown", time.time() - t1))
        ok = ok and rc == 0
    timings.append(("total", time.time() - t0))
    print("\n| step | seconds |\n|---|---|")
    for name, secs in timings:
        print(f"| {name} | {secs:.2f} |")
    if ok and not args.keep and not args.dir:
        shutil.rmtree(d, ignore_errors=True)
    print("smoke: 1 passed, 0 failed" if ok else "smoke: 0 passed, 1 failed")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
