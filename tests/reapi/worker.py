#!/usr/bin/env python3
"""TEST FIXTURE: a small host-tools REAPI worker for BuildGrid's Bots API.

It stands in for buildbox-worker + buildbox-run-hosttools, which cannot be installed on kbuild's machines
(C++, in neither Debian nor PyPI). It is NOT part of kbuild: only kbuild's remote-execution tests use it.
BuildGrid (the real REAPI server) schedules the work; this bot only runs what it is leased.

Protocol (google.devtools.remoteworkers.v1test2, protos shipped inside the buildgrid package):
  CreateBotSession, then UpdateBotSession in a loop. BuildGrid long-polls while the bot has free capacity and
  hands out leases already ACTIVE (a PENDING one is acknowledged as ACTIVE). The bot runs each lease's Action
  and reports it COMPLETED with a google.rpc.Status and the ActionResult packed into Lease.result; BuildGrid
  then answers the Execute call and writes the ActionCache. A lease that vanishes from the server's reply was
  cancelled: its process group is killed.

Per lease: fetch Action, Command and the input root from CAS (BatchReadBlobs below the server's batch limit,
ByteStream Read above it), materialise it in a fresh temp dir, run Command.arguments with only the Command's
environment in <input root>/<working_directory>, enforce Action.timeout (kill the process group, status
DEADLINE_EXCEEDED), upload output files and stdout/stderr (BatchUpdateBlobs / ByteStream Write). SHA-256 only.
Output directories and symlinks are not collected (files only).

Needs the buildgrid venv (tests/reapi/install.sh). Usage:
  worker.py --remote grpc://127.0.0.1:PORT [--instance NAME] [--name BOT] [--cpus N] [--work-dir DIR]
            [--property OSFamily=linux --property kbuild-toolchain=... ...]
"""
import argparse, hashlib, os, shutil, signal, socket, subprocess, sys, tempfile, threading, time, uuid
from datetime import datetime, timezone

import grpc
from google.protobuf import timestamp_pb2
from buildgrid._protos.google.rpc import code_pb2, status_pb2
from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from buildgrid._protos.google.bytestream import bytestream_pb2, bytestream_pb2_grpc
from buildgrid._protos.google.devtools.remoteworkers.v1test2 import bots_pb2, bots_pb2_grpc, worker_pb2

CHUNK = 1 << 20
HEARTBEAT = 2.0
# Run commands through `setpriv --pdeathsig KILL` (util-linux) so that they die if the worker is SIGKILLed
# (no orphans). Not a preexec_fn: that makes Python fork() and run gRPC's fork handlers in the child, which
# aborted the child now and then (exit 134); without it Python uses vfork() and runs no Python in the child.
SETPRIV = shutil.which("setpriv") or ("/usr/bin/setpriv" if os.access("/usr/bin/setpriv", os.X_OK) else None)


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, file=sys.stderr, flush=True)


def now_ts():
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(datetime.now(timezone.utc))
    return ts


def digest_of(data):
    return re_pb2.Digest(hash=hashlib.sha256(data).hexdigest(), size_bytes=len(data))


class Cas:
    """CAS client that respects the server's max batch size (BuildGrid: 4 MiB minus overhead)."""

    def __init__(self, channel, instance):
        self.instance = instance
        self.cas = re_grpc.ContentAddressableStorageStub(channel)
        self.bs = bytestream_pb2_grpc.ByteStreamStub(channel)
        caps = re_grpc.CapabilitiesStub(channel).GetCapabilities(
            re_pb2.GetCapabilitiesRequest(instance_name=instance), timeout=30)
        limit = caps.cache_capabilities.max_batch_total_size_bytes or (4 << 20)
        self.batch_limit = min(limit, 4 << 20) - 64 * 1024  # headroom for per-blob framing

    def _batches(self, digests):
        batch, size = [], 0
        for d in digests:
            if batch and size + d.size_bytes + 256 > self.batch_limit:
                yield batch
                batch, size = [], 0
            batch.append(d)
            size += d.size_bytes + 256
        if batch:
            yield batch

    def read_many(self, digests):
        """{hash: bytes} for the given digests (deduplicated)."""
        out, small = {}, []
        for d in {d.hash: d for d in digests}.values():
            if d.size_bytes == 0:
                out[d.hash] = b""
            elif d.size_bytes + 256 > self.batch_limit:
                name = f"{self.instance}/blobs/{d.hash}/{d.size_bytes}".lstrip("/")
                out[d.hash] = b"".join(r.data for r in self.bs.Read(bytestream_pb2.ReadRequest(resource_name=name)))
            else:
                small.append(d)
        for batch in self._batches(small):
            resp = self.cas.BatchReadBlobs(re_pb2.BatchReadBlobsRequest(instance_name=self.instance, digests=batch))
            for r in resp.responses:
                if r.status.code != code_pb2.OK:
                    raise LookupError(f"missing input blob {r.digest.hash}/{r.digest.size_bytes}: {r.status.message}")
                out[r.digest.hash] = r.data
        for d in digests:
            if hashlib.sha256(out[d.hash]).hexdigest() != d.hash:
                raise LookupError(f"blob {d.hash} has the wrong content")
        return out

    def read(self, digest, msg_type):
        msg = msg_type()
        msg.ParseFromString(self.read_many([digest])[digest.hash])
        return msg

    def write_many(self, blobs):
        """Upload a list of bytes; returns their digests."""
        digests, small = [], []
        for data in blobs:
            d = digest_of(data)
            digests.append(d)
            if d.size_bytes + 256 > self.batch_limit:
                name = f"{self.instance}/uploads/{uuid.uuid4()}/blobs/{d.hash}/{d.size_bytes}".lstrip("/")
                reqs = (bytestream_pb2.WriteRequest(resource_name=name if off == 0 else "", write_offset=off,
                                                    data=data[off:off + CHUNK], finish_write=off + CHUNK >= len(data))
                        for off in range(0, len(data), CHUNK))
                self.bs.Write(reqs)
            elif d.size_bytes:
                small.append((d, data))
        by_hash = dict((d.hash, data) for d, data in small)
        for batch in self._batches([d for d, _ in small]):
            req = re_pb2.BatchUpdateBlobsRequest(instance_name=self.instance, requests=[
                re_pb2.BatchUpdateBlobsRequest.Request(digest=d, data=by_hash[d.hash]) for d in batch])
            for r in self.cas.BatchUpdateBlobs(req).responses:
                if r.status.code != code_pb2.OK:
                    raise IOError(f"upload of {r.digest.hash} failed: {r.status.message}")
        return digests


class Job:
    def __init__(self, lease):
        self.lease = lease          # the Lease as the server sent it
        self.done = False
        self.cancelled = False
        self.timed_out = False
        self.proc = None
        self.status = status_pb2.Status(code=code_pb2.OK)
        self.result = None          # ActionResult

    def kill(self):
        self.cancelled = True
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class BearerToken(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                  grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds `authorization: Bearer TOKEN` to every call."""

    def __init__(self, token):
        self.header = ("authorization", f"Bearer {token}")

    def _with_token(self, details):
        md = list(details.metadata or []) + [self.header]
        return details._replace(metadata=md) if hasattr(details, "_replace") else _Details(details, md)

    def intercept_unary_unary(self, cont, details, request):
        return cont(self._with_token(details), request)

    def intercept_unary_stream(self, cont, details, request):
        return cont(self._with_token(details), request)

    def intercept_stream_unary(self, cont, details, requests):
        return cont(self._with_token(details), requests)

    def intercept_stream_stream(self, cont, details, requests):
        return cont(self._with_token(details), requests)


class _Details(grpc.ClientCallDetails):
    def __init__(self, d, metadata):
        self.method, self.timeout, self.metadata = d.method, d.timeout, metadata
        self.credentials, self.wait_for_ready = d.credentials, d.wait_for_ready
        self.compression = getattr(d, "compression", None)


class Bot:
    def __init__(self, args):
        self.args = args
        target = args.remote.removeprefix("grpc://").removeprefix("http://")
        self.channel = grpc.insecure_channel(target, options=[("grpc.max_receive_message_length", 64 << 20)])
        token = os.environ.get("KBUILD_REAPI_TOKEN")
        if token:  # a server that checks bearer tokens (serve.py --auth)
            self.channel = grpc.intercept_channel(self.channel, BearerToken(token))
        self.instance = args.instance
        self.cas = Cas(self.channel, self.instance)
        self.bots = bots_pb2_grpc.BotsStub(self.channel)
        self.jobs = {}              # lease id -> Job
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)  # notified when a job finishes
        self.finished = 0                              # count of finished jobs
        self.stopping = threading.Event()
        props = [worker_pb2.Device.Property(key=k, value=v) for k, v in args.property]
        self.worker = worker_pb2.Worker(
            devices=[worker_pb2.Device(handle=args.name, properties=props)],
            configs=[worker_pb2.Worker.Config(key="capacity", value=str(args.cpus))])

    # ---- session loop ----
    def leases_to_report(self):
        with self.lock:
            out = []
            for job in self.jobs.values():
                lease = bots_pb2.Lease()
                lease.CopyFrom(job.lease)
                if job.done:
                    lease.state = bots_pb2.LeaseState.COMPLETED
                    lease.status.CopyFrom(job.status)
                    if job.result is not None:
                        lease.result.Pack(job.result)
                else:
                    lease.state = bots_pb2.LeaseState.ACTIVE
                out.append(lease)
            return out

    def reconcile(self, reported, session):
        """Apply the server's view: drop acknowledged completions, start new leases, kill vanished ones."""
        completed = {l.id for l in reported if l.state == bots_pb2.LeaseState.COMPLETED}
        with self.lock:
            for lid in completed:
                self.jobs.pop(lid, None)
            live = {l.id for l in session.leases}
            for lid, job in list(self.jobs.items()):
                if lid not in live and not job.done and any(l.id == lid for l in reported):
                    log(f"lease {lid} was cancelled or reassigned by the server: killing it")
                    job.kill()
                    self.jobs.pop(lid)
            for lease in session.leases:
                if lease.state in (bots_pb2.LeaseState.PENDING, bots_pb2.LeaseState.ACTIVE) and lease.id not in self.jobs:
                    job = self.jobs[lease.id] = Job(lease)
                    threading.Thread(target=self.run_job, args=(job,), daemon=True).start()

    def update(self, session, timeout):
        """One UpdateBotSession call; cancelled early when one of our jobs finishes or we are stopping."""
        gen = self.finished
        session.ClearField("leases")
        reported = self.leases_to_report()
        session.leases.extend(reported)
        fut = self.bots.UpdateBotSession.future(
            bots_pb2.UpdateBotSessionRequest(name=session.name, bot_session=session), timeout=timeout)
        answered = threading.Event()
        fut.add_done_callback(lambda _f: answered.set())
        while not answered.wait(0.1):
            if self.stopping.is_set() or self.finished != gen:
                # Report the finished job now instead of after the long poll. BuildGrid re-sends any lease
                # it assigned during a cancelled call, so this is safe.
                fut.cancel()
                return session
        new = fut.result()
        self.reconcile(reported, new)
        return new

    def create_session(self):
        session = bots_pb2.BotSession(bot_id=self.args.name, status=bots_pb2.BotStatus.OK, worker=self.worker)
        # A deadline under 3.75 s makes BuildGrid skip its long poll here (it needs 0.8 x deadline >= 3 s), so
        # the session is registered (and the log line below, which serve.py waits for, appears) at once.
        for attempt in range(20):
            try:
                session = self.bots.CreateBotSession(
                    bots_pb2.CreateBotSessionRequest(parent=self.instance, bot_session=session), timeout=3.5)
                break
            except grpc.RpcError as e:
                if attempt == 19 or e.code() not in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE):
                    raise
                self.stopping.wait(0.5)
        log(f"bot session {session.name} created; properties {dict(self.args.property)}; capacity {self.args.cpus}")
        self.reconcile([], session)
        return session

    def serve(self):
        session = self.create_session()
        failures = 0
        while not self.stopping.is_set():
            try:
                session = self.update(session, timeout=30)
                failures = 0
                # BuildGrid answers at once while we are at capacity: then heartbeat every HEARTBEAT s (well
                # inside bot-session-keepalive-timeout) or as soon as a job finishes.
                with self.changed:
                    self.changed.wait_for(lambda: self.stopping.is_set() or any(j.done for j in self.jobs.values())
                                          or len(self.jobs) < self.args.cpus, timeout=HEARTBEAT)
            except grpc.RpcError as e:
                if self.stopping.is_set():
                    break
                if e.code() == grpc.StatusCode.INVALID_ARGUMENT and "does not exist" in (e.details() or ""):
                    # BuildGrid reaped our session (we missed the keepalive) and requeued its leases.
                    log("bot session was reaped by the server: dropping local jobs, opening a new session")
                    with self.lock:
                        for job in self.jobs.values():
                            job.kill()
                        self.jobs.clear()
                    session = self.create_session()
                    continue
                failures += 1
                log(f"UpdateBotSession failed ({e.code().name}: {e.details()}); retry {failures}")
                if failures > 30:
                    raise
                self.stopping.wait(1)
        self.close(session)

    def close(self, session):
        # Why: a bot that just disappears keeps its leases until bot-session-keepalive-timeout, and BuildGrid
        # dedups a repeat Execute of the same action onto that stranded job, so clients hang meanwhile. So on
        # SIGTERM we kill our commands, hand every unfinished lease back as COMPLETED with the retryable status
        # UNAVAILABLE (BuildGrid requeues it at once) and mark the session BOT_TERMINATING so that it gets no
        # new work. The Bots API has no explicit "close session" call; BuildGrid reaps the empty session later.
        handed_back = 0
        with self.lock:
            for job in self.jobs.values():
                if not job.done:
                    handed_back += 1
                    job.kill()  # sets job.cancelled, so run_job() reports nothing more
                    job.done, job.result = True, None
                    job.status = status_pb2.Status(code=code_pb2.UNAVAILABLE, message="worker is shutting down")
        session.status = bots_pb2.BotStatus.BOT_TERMINATING
        session.ClearField("leases")
        session.leases.extend(self.leases_to_report())
        try:
            self.bots.UpdateBotSession(bots_pb2.UpdateBotSessionRequest(name=session.name, bot_session=session),
                                       timeout=10)
            log(f"bot session closed; {handed_back} unfinished lease(s) handed back")
        except grpc.RpcError as e:
            log(f"closing the bot session failed: {e.code().name}: {e.details()}")

    # ---- running one lease ----
    def run_job(self, job):
        result, status = None, status_pb2.Status(code=code_pb2.OK)
        try:
            result = self.execute(job)
            if job.timed_out:
                status = status_pb2.Status(code=code_pb2.DEADLINE_EXCEEDED, message="action timed out")
        except LookupError as e:  # missing or corrupt input blob
            status = status_pb2.Status(code=code_pb2.FAILED_PRECONDITION, message=str(e))
        except Exception as e:  # report, never crash the bot
            log(f"lease {job.lease.id} failed: {e!r}")
            status = status_pb2.Status(code=code_pb2.INTERNAL, message=f"worker error: {e!r}")
        with self.lock:
            if job.cancelled:  # the server took it back, or close() already handed it back
                return
            job.result, job.status, job.done = result, status, True
            self.finished += 1
            self.changed.notify_all()
        log(f"lease {job.lease.id} done: status {code_pb2.Code.Name(status.code)}"
            + (f", exit code {result.exit_code}" if result else ""))

    def execute(self, job):
        md = re_pb2.ExecutedActionMetadata(worker=self.args.name, worker_start_timestamp=now_ts())
        action = re_pb2.Action()
        if job.lease.payload.Is(re_pb2.Action.DESCRIPTOR):
            job.lease.payload.Unpack(action)
        else:  # BuildGrid sends the Action itself; a bare Digest is allowed too
            digest = re_pb2.Digest()
            job.lease.payload.Unpack(digest)
            action = self.cas.read(digest, re_pb2.Action)
        root = tempfile.mkdtemp(prefix="lease-", dir=self.args.work_dir)
        try:
            md.input_fetch_start_timestamp.CopyFrom(now_ts())
            command = self.cas.read(action.command_digest, re_pb2.Command)
            self.materialise(action.input_root_digest, root)
            md.input_fetch_completed_timestamp.CopyFrom(now_ts())
            cwd = os.path.join(root, command.working_directory)
            outputs = list(command.output_paths) or list(command.output_files)
            for p in outputs:
                os.makedirs(os.path.dirname(os.path.join(cwd, p)), exist_ok=True)
            env = {v.name: v.value for v in command.environment_variables}
            timeout = action.timeout.seconds + action.timeout.nanos / 1e9 if action.HasField("timeout") else None
            md.execution_start_timestamp.CopyFrom(now_ts())
            with open(os.path.join(root, ".stdout"), "w+b") as out, open(os.path.join(root, ".stderr"), "w+b") as err:
                exit_code = self.run_command(job, list(command.arguments), env, cwd, timeout, out, err)
                md.execution_completed_timestamp.CopyFrom(now_ts())
                out.seek(0), err.seek(0)
                stdout, stderr = out.read(), err.read()
            md.output_upload_start_timestamp.CopyFrom(now_ts())
            files = []
            for p in outputs:
                full = os.path.join(cwd, p)
                if os.path.isfile(full) and not os.path.islink(full):
                    with open(full, "rb") as f:
                        files.append((p, f.read(), os.access(full, os.X_OK)))
            digests = self.cas.write_many([stdout, stderr] + [data for _, data, _ in files])
            result = re_pb2.ActionResult(exit_code=exit_code, stdout_digest=digests[0], stderr_digest=digests[1])
            for (p, _, x), d in zip(files, digests[2:]):
                result.output_files.add(path=p, digest=d, is_executable=x)
            md.output_upload_completed_timestamp.CopyFrom(now_ts())
            md.worker_completed_timestamp.CopyFrom(now_ts())
            result.execution_metadata.CopyFrom(md)
            return result
        finally:
            shutil.rmtree(root, ignore_errors=True)

    def run_command(self, job, argv, env, cwd, timeout, out, err):
        if job.cancelled:
            return 1
        try:
            wrapped = [SETPRIV, "--pdeathsig", "KILL", "--"] + argv if SETPRIV else argv
            job.proc = subprocess.Popen(wrapped, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                        start_new_session=True)
            # Tests watch for this line to act while a command runs (kill the worker mid-action).
            log(f"lease {job.lease.id} running: {os.path.basename(argv[0])}")
        except OSError as e:  # e.g. argv[0] not found: behave like a shell would
            err.write(f"worker: cannot run {argv[:1]}: {e}\n".encode())
            return 127
        try:
            code = job.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(job.proc.pid, signal.SIGKILL)
            job.proc.wait()
            job.timed_out = True
            err.write(f"worker: killed after the action timeout of {timeout:g} s\n".encode())
            return 128 + signal.SIGKILL
        return code if code >= 0 else 128 - code

    def materialise(self, root_digest, path):
        """Write the input root: one BatchReadBlobs per tree level for Directory messages, then all files."""
        dirs, level = [], [(root_digest, path)]
        while level:
            blobs = self.cas.read_many([d for d, _ in level])
            nxt = []
            for d, p in level:
                directory = re_pb2.Directory()
                directory.ParseFromString(blobs[d.hash])
                os.makedirs(p, exist_ok=True)
                dirs.append((directory, p))
                nxt += [(sub.digest, os.path.join(p, sub.name)) for sub in directory.directories]
            level = nxt
        files = [(f, p) for directory, p in dirs for f in directory.files]
        cache = self.args.cas_cache
        if cache:
            # A local CAS cache, as real workers keep one (buildbox-casd, Buildbarn): a file
            # fetched once is hard-linked into every later input root (read-only).
            cached = lambda f: os.path.join(cache, f.digest.hash + (".x" if f.is_executable else ""))
            fetch = [f for f, _ in files if not os.path.exists(cached(f))]
            data = self.cas.read_many([f.digest for f in fetch]) if fetch else {}
            for f in fetch:
                tmp = f"{cached(f)}.{os.getpid()}.{threading.get_ident()}.tmp"
                with open(tmp, "wb") as fh:
                    fh.write(data[f.digest.hash])
                os.chmod(tmp, 0o555 if f.is_executable else 0o444)
                os.replace(tmp, cached(f))
            for f, p in files:
                os.link(cached(f), os.path.join(p, f.name))
        else:
            data = self.cas.read_many([f.digest for f, _ in files])
            for f, p in files:
                target = os.path.join(p, f.name)
                with open(target, "wb") as fh:
                    fh.write(data[f.digest.hash])
                os.chmod(target, 0o755 if f.is_executable else 0o644)
        for directory, p in dirs:
            for s in directory.symlinks:
                os.symlink(s.target, os.path.join(p, s.name))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--remote", required=True, help="grpc://HOST:PORT of the BuildGrid server")
    ap.add_argument("--instance", default="", help="REAPI instance name")
    ap.add_argument("--name", default=f"{socket.gethostname()}-{os.getpid()}", help="bot id")
    ap.add_argument("--cpus", type=int, default=1, help="concurrent leases")
    ap.add_argument("--work-dir", default=None, help="where input roots are materialised (default: TMPDIR)")
    ap.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                    type=lambda s: tuple(s.split("=", 1)) if "=" in s else ap.error(f"--property {s}: need KEY=VALUE"),
                    help="platform property this bot satisfies (repeatable)")
    ap.add_argument("--cas-cache", default=None,
                    help="a local CAS cache: fetched files kept here and hard-linked into input roots "
                         "(same file system as --work-dir)")
    args = ap.parse_args()
    if args.work_dir:
        os.makedirs(args.work_dir, exist_ok=True)
    if args.cas_cache:
        os.makedirs(args.cas_cache, exist_ok=True)
    bot = Bot(args)

    def on_signal(signum, _frame):
        log(f"signal {signum}: closing the bot session")
        bot.stopping.set()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    bot.serve()


if __name__ == "__main__":
    main()
