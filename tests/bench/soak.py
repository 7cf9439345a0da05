#!/usr/bin/env python3
"""soak.py: the workers, the sampler and the checks of tests/bench/soak.sh.

  soak.py writer DIR MODEL SEED END STATS BUDGET_MIB [DOWN]
      Until the epoch END: files of random sizes made in DIR (a slowmedia
      mount's directory, this writer's alone), random ranges overwritten,
      appended, truncated, renamed, deleted (so DIR stays under BUDGET_MIB),
      fsync now and then, and now and then a file read back through DIR and
      compared with MODEL. Every change is made the same way in MODEL (a
      directory on a fast disk) once it succeeded on DIR, so MODEL holds what
      DIR must hold. The choices come from Random(SEED) only: a seed gives
      the same sequence of operations again. STATS (JSON) is rewritten every
      few seconds and at the end. DOWN: a file that exists while the mount's
      daemon is being killed and mounted again (soak.sh --kill-at): no op
      starts then, and an op the kill cut off (ENOTCONN, ECONNABORTED) is
      counted as cut off, not as an error; its files are left out of the
      check (what it left is unknown), everything acknowledged before stays
      in the model.
  soak.py reader MNT SEED END STATS [DOWN]
      Until END: random ranges or whole files of MNT's writers' directories
      read (each file picked from a listing of a random writer's directory),
      with a pause between reads, the kernel's cached pages dropped first
      half of the time; now and then every entry of the listing stat'ed.
  soak.py sample OUT T0 RUN_T0 MINUTES SLOWMEDIACTL STATS_DIR NAME=PID[:MNT:MODEL]...
      (PID may be @FILE: the pid is read from FILE at each sample, so a
      daemon started again is followed)
      /proc/PID of each process every second into OUT (TSV: t name pid and
      FIELDS: with MNT and MODEL, the fds on MNT's files are told apart and
      MODEL's files counted); every minute after RUN_T0 (an epoch),
      up to MINUTES, a line per process on stderr, with its queue (from
      SLOWMEDIACTL status --json) and the workers' totals; a daemon that
      flushed nothing in the minute while data stayed queued is flagged,
      and its threads' stacks saved in OUT.stall-NAME.txt. [s] on each line
      counts from T0, the script's start. Writes OUT.threads (JSON: the
      thread names of each process at its peak count). Ends on SIGTERM.
  soak.py check MODEL MEDIUM JSON SAVE|- [WRITER_STATS...]
      Every file under MODEL against the same path under MEDIUM (the images
      mounted read-only) and back: missing, extra, size and content
      differences printed (files the writers' STATS name as unknown after
      an error are left out). The first differing files are copied, both
      versions, into SAVE (unless -). Exit 1 on any difference.
  soak.py report ARGS (see report_main)
      Peaks and bounds of the samples, the workers' totals, the verdict:
      a table on stdout and the JSON. Exit 1 if anything failed.
"""
import errno
import json
import math
import os
import random
import signal
import stat
import subprocess
import sys
import time

KIB = 1024
MIB = 1024 * 1024
FILE_MIN = 4 * KIB
FILE_MAX = 4 * MIB
PIECE_MAX = 1 * MIB  # one write() of a new file, one overwrite
STATS_EVERY_S = 5.0
CREATE_FSYNC_P = 0.10
OVERWRITE_FSYNC_P = 0.05
HOLE_P = 0.10  # an overwrite that starts past the end (a hole)
HOLE_MAX = 256 * KIB
READER_PAUSE_S = (0.05, 1.0)
SLOW_S = 1.0  # a writer's op or a reader's open+read that takes longer is noted
SAMPLE_S = 1.0
CMP_BLOCK = 1 * MIB
MAX_DIFF_LINES = 40
MAX_SAVED = 20


def log_uniform(rng, lo, hi):
    return int(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def pwrite_all(fd, buf, off):
    mv = memoryview(buf)
    while mv:
        n = os.pwrite(fd, mv, off)
        if n <= 0:
            raise OSError(errno.EIO, "pwrite wrote nothing")
        mv = mv[n:]
        off += n


def write_all(fd, buf):
    mv = memoryview(buf)
    while mv:
        n = os.write(fd, mv)
        if n <= 0:
            raise OSError(errno.EIO, "write wrote nothing")
        mv = mv[n:]


def read_file(path, drop_cache):
    fd = os.open(path, os.O_RDONLY)
    try:
        if drop_cache:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        chunks = []
        while True:
            b = os.read(fd, CMP_BLOCK)
            if not b:
                break
            chunks.append(b)
        return b"".join(chunks)
    finally:
        os.close(fd)


# What an op on a mount whose daemon was killed gets (in flight; after).
CUT_OFF = (errno.ENOTCONN, errno.ECONNABORTED)
DOWN_POLL_S = 0.2


def wait_up(down, end):
    """Until the DOWN file is gone (the mount is back), or the deadline."""
    t = time.monotonic()
    while down and os.path.exists(down) and time.time() < end:
        time.sleep(DOWN_POLL_S)
    return time.monotonic() - t


def cut_off(e, down):
    return e.errno in CUT_OFF or bool(down and os.path.exists(down))


def save_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


def pct(vals, p):
    if not vals:
        return None
    v = sorted(vals)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


def first_diff(a, b):
    """Offset of the first differing byte of a and b (sizes may differ)."""
    n = min(len(a), len(b))
    lo = 0
    step = 4096
    while lo < n:
        hi = min(n, lo + step)
        if a[lo:hi] != b[lo:hi]:
            for i in range(lo, hi):
                if a[i] != b[i]:
                    return i
        lo = hi
    return n if len(a) != len(b) else -1


def diff_blocks(a, b, bs=4096):
    """4 KiB blocks that differ, and how many of those are all zeros in b."""
    n = max(len(a), len(b))
    bad = zeros = 0
    for off in range(0, n, bs):
        x, y = a[off:off + bs], b[off:off + bs]
        if x != y:
            bad += 1
            if y.count(0) == len(y):
                zeros += 1
    return bad, zeros


# ---- writer -----------------------------------------------------------------

class Writer:
    def __init__(self, d, model, seed, end, stats, budget_mib, down=None):
        self.d, self.model, self.end, self.stats_path = d, model, end, stats
        self.down = down
        self.cut = []  # ops a kill of the daemon cut off (see cut_off_op)
        self.tidy = []  # their files, to remove from the mount once it is back
        self.down_s = 0.0  # time spent waiting for the mount to come back
        self.budget = budget_mib * MIB
        self.rng = random.Random(seed)
        self.files = {}  # name -> size, as the model has it
        self.seq = 0
        self.ops = {}
        self.bytes = 0
        self.fsync_ms = []
        self.errors = []
        self.excluded = []  # names whose content is unknown after an error
        self.live_checks = 0
        self.live_diffs = []
        self.cur = []  # the names the op in progress touches
        self.slow_ops = []  # ops that took SLOW_S or more
        self.t_start = time.time()
        self.last_save = 0.0

    def new_name(self):
        self.seq += 1
        return "f%06d" % self.seq

    def paths(self, name):
        return os.path.join(self.d, name), os.path.join(self.model, name)

    def count(self, op):
        self.ops[op] = self.ops.get(op, 0) + 1

    def fsync(self, fd):
        t = time.monotonic()
        os.fsync(fd)
        self.fsync_ms.append(round((time.monotonic() - t) * 1000.0, 1))

    def save(self, done=False):
        save_json(self.stats_path, {
            "kind": "writer", "dir": self.d, "done": done,
            "elapsed_s": round(time.time() - self.t_start, 1),
            "ops": self.ops, "bytes": self.bytes, "files": len(self.files),
            "model_bytes": sum(self.files.values()), "fsync_ms": self.fsync_ms,
            "errors": self.errors, "excluded": self.excluded,
            "live_checks": self.live_checks, "live_diffs": self.live_diffs,
            "slow_ops": self.slow_ops, "cut_off": self.cut, "down_s": round(self.down_s, 1),
        })
        self.last_save = time.time()

    def failed(self, op, names, e):
        self.errors.append({"op": op, "path": os.path.join(self.d, names[0] if names else ""),
                            "errno": e.errno, "error": str(e),
                            "t": round(time.time() - self.t_start, 1)})
        print("soak writer %s: %s %s: %s" % (self.d, op, names, e), file=sys.stderr, flush=True)
        # What the file holds is unknown now: forget it on both sides.
        for n in names:
            self.files.pop(n, None)
            m, md = self.paths(n)
            try:
                os.unlink(md)
            except OSError:
                pass
            try:
                os.unlink(m)
            except FileNotFoundError:
                pass
            except OSError:
                self.excluded.append(n)

    def cut_off_op(self, op, names, e):
        """The daemon was killed under op: what its files hold on the medium
        is unknown (the op's acknowledged part must be there, the rest may
        be): forgotten in the model and left out of the check. The mount is
        down, so nothing is asked of it."""
        self.cut.append({"op": op, "names": names, "errno": e.errno,
                         "t": round(time.time() - self.t_start, 1)})
        print("soak writer %s: %s %s cut off by the kill: %s" % (self.d, op, names, e),
              file=sys.stderr, flush=True)
        for n in names:
            self.files.pop(n, None)
            try:
                os.unlink(self.paths(n)[1])
            except OSError:
                pass
            self.excluded.append(n)
            self.tidy.append(n)

    def tidy_cut(self):
        """The cut-off ops' files, removed from the mount once it is back, so
        that it holds the model's files (they stay excluded from the check)."""
        left = []
        for n in self.tidy:
            try:
                os.unlink(self.paths(n)[0])
            except FileNotFoundError:
                pass
            except OSError:
                left.append(n)
        self.tidy = left

    def pick(self):
        """A random file of ours; it is what the op touches (see failed)."""
        name = self.rng.choice(sorted(self.files))
        self.cur = [name]
        return name

    def op_create(self):
        name = self.new_name()
        self.cur = [name]
        size = log_uniform(self.rng, FILE_MIN, FILE_MAX)
        data = self.rng.randbytes(size)
        pieces = []
        left = size
        while left > 0:
            n = min(left, log_uniform(self.rng, 512, PIECE_MAX))
            pieces.append(n)
            left -= n
        do_fsync = self.rng.random() < CREATE_FSYNC_P
        m, md = self.paths(name)
        fd = os.open(m, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            off = 0
            for n in pieces:
                write_all(fd, data[off:off + n])
                off += n
            if do_fsync:
                self.fsync(fd)
        finally:
            os.close(fd)
        with open(md, "wb") as f:
            f.write(data)
        self.files[name] = size
        self.bytes += size
        return [name]

    def op_overwrite(self):
        name = self.pick()
        size = self.files[name]
        if self.rng.random() < HOLE_P:
            off = size + self.rng.randint(1, HOLE_MAX)
        else:
            off = self.rng.randint(0, size)
        n = log_uniform(self.rng, 1, PIECE_MAX)
        data = self.rng.randbytes(n)
        do_fsync = self.rng.random() < OVERWRITE_FSYNC_P
        m, md = self.paths(name)
        fd = os.open(m, os.O_WRONLY)
        try:
            pwrite_all(fd, data, off)
            if do_fsync:
                self.fsync(fd)
        finally:
            os.close(fd)
        fd = os.open(md, os.O_WRONLY)
        try:
            pwrite_all(fd, data, off)
        finally:
            os.close(fd)
        self.files[name] = max(size, off + n)
        self.bytes += n
        return [name]

    def op_append(self):
        name = self.pick()
        n = log_uniform(self.rng, 1, PIECE_MAX)
        data = self.rng.randbytes(n)
        m, md = self.paths(name)
        for p in (m, md):
            fd = os.open(p, os.O_WRONLY | os.O_APPEND)
            try:
                write_all(fd, data)
            finally:
                os.close(fd)
        self.files[name] += n
        self.bytes += n
        return [name]

    def op_truncate(self):
        name = self.pick()
        size = self.files[name]
        new = self.rng.randint(0, size + 64 * KIB)
        m, md = self.paths(name)
        if self.rng.random() < 0.5:
            os.truncate(m, new)
        else:
            fd = os.open(m, os.O_WRONLY)
            try:
                os.ftruncate(fd, new)
            finally:
                os.close(fd)
        os.truncate(md, new)
        self.files[name] = new
        return [name]

    def op_rename(self):
        name = self.pick()
        # Now and then over another file of ours (which then goes away).
        if len(self.files) > 1 and self.rng.random() < 0.3:
            target = self.rng.choice(sorted(n for n in self.files if n != name))
        else:
            target = self.new_name()
        self.cur = [name, target]
        m, md = self.paths(name)
        t, td = self.paths(target)
        os.rename(m, t)
        os.rename(md, td)
        self.files[target] = self.files.pop(name)
        return [name, target]

    def op_delete(self):
        name = self.pick()
        m, md = self.paths(name)
        os.unlink(m)
        os.unlink(md)
        del self.files[name]
        return [name]

    def op_fsync(self):
        name = self.pick()
        m, _ = self.paths(name)
        fd = os.open(m, os.O_RDWR)
        try:
            self.fsync(fd)
        finally:
            os.close(fd)
        return [name]

    def op_verify(self):
        name = self.pick()
        m, md = self.paths(name)
        got = read_file(m, True)
        want = read_file(md, False)
        self.live_checks += 1
        if got != want:
            bad, zeros = diff_blocks(want, got)
            d = {"path": m, "model_size": len(want), "read_size": len(got),
                 "first_diff": first_diff(want, got), "blocks": bad, "zero_blocks": zeros,
                 "t": round(time.time() - self.t_start, 1)}
            self.live_diffs.append(d)
            print("soak writer: LIVE DIFF %s" % json.dumps(d), file=sys.stderr, flush=True)
        return [name]

    # (probability, op) over a writer that has files; create when it has none.
    MIX = [(0.36, "create"), (0.30, "overwrite"), (0.08, "append"), (0.05, "truncate"),
           (0.04, "rename"), (0.07, "delete"), (0.04, "fsync"), (0.06, "verify")]

    def choose(self):
        if sum(self.files.values()) > self.budget:
            return "delete"
        if not self.files:
            return "create"
        r = self.rng.random() * sum(p for p, _ in self.MIX)
        for p, op in self.MIX:
            if r < p:
                return op
            r -= p
        return self.MIX[-1][1]

    def run(self):
        os.makedirs(self.model, exist_ok=True)
        while time.time() < self.end:
            self.down_s += wait_up(self.down, self.end)
            if time.time() >= self.end:
                break
            if self.tidy:
                self.tidy_cut()
            op = self.choose()
            self.cur = []
            t0 = time.time()
            try:
                getattr(self, "op_" + op)()
                self.count(op)
            except OSError as e:
                if cut_off(e, self.down):
                    self.cut_off_op(op, self.cur, e)
                    self.down_s += wait_up(self.down, self.end)
                else:
                    self.failed(op, self.cur, e)
            if time.time() - t0 >= SLOW_S:
                self.slow_ops.append({"op": op, "paths": [os.path.join(self.d, n) for n in self.cur],
                                      "t0": round(t0, 3), "t1": round(time.time(), 3)})
            if time.time() - self.last_save >= STATS_EVERY_S:
                self.save()
        if self.tidy and not (self.down and os.path.exists(self.down)):
            self.tidy_cut()
        self.save(done=True)
        return 0


def writer_main(a):
    d, model, seed, end, stats, budget = a[:6]
    down = a[6] if len(a) > 6 else None
    return Writer(d, model, int(seed), float(end), stats, int(budget), down).run()


# ---- reader -----------------------------------------------------------------

def reader_main(a):
    mnt, seed, end, stats_path = a[:4]
    down = a[4] if len(a) > 4 else None
    end = float(end)
    rng = random.Random(int(seed))
    st = {"kind": "reader", "dir": mnt, "done": False, "reads": 0, "bytes": 0,
          "enoent": 0, "listings": 0, "errors": [], "read_ms": [], "open_ms": [], "slow": [],
          "cut_off": 0, "down_s": 0.0}
    t0 = time.time()
    last = 0.0
    while time.time() < end:
        st["down_s"] += wait_up(down, end)
        try:
            dirs = sorted(e for e in os.listdir(mnt) if e.startswith("w"))
            if not dirs:
                time.sleep(0.2)
                continue
            d = os.path.join(mnt, rng.choice(dirs))
            names = sorted(os.listdir(d))
            if rng.random() < 0.1:
                for n in names:
                    try:
                        os.stat(os.path.join(d, n))
                    except FileNotFoundError:
                        pass
                st["listings"] += 1
            elif names:
                p = os.path.join(d, rng.choice(names))
                t = time.monotonic()
                fd = os.open(p, os.O_RDONLY)
                try:
                    size = os.fstat(fd).st_size
                    st["open_ms"].append(round((time.monotonic() - t) * 1000.0, 1))
                    if rng.random() < 0.5:
                        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    if rng.random() < 0.3:
                        off, n = 0, size
                    else:
                        off = rng.randint(0, max(0, size - 1))
                        n = log_uniform(rng, 4 * KIB, PIECE_MAX)
                    got = 0
                    while got < n:
                        b = os.pread(fd, min(CMP_BLOCK, n - got), off + got)
                        if not b:
                            break
                        got += len(b)
                finally:
                    os.close(fd)
                st["read_ms"].append(round((time.monotonic() - t) * 1000.0, 1))
                if st["read_ms"][-1] >= SLOW_S * 1000.0:
                    st["slow"].append({"path": p, "t1": round(time.time(), 3),
                                       "open_ms": st["open_ms"][-1], "ms": st["read_ms"][-1]})
                st["reads"] += 1
                st["bytes"] += got
        except FileNotFoundError:
            st["enoent"] += 1  # deleted or renamed by its writer meanwhile
        except OSError as e:
            if cut_off(e, down):
                st["cut_off"] += 1
                st["down_s"] += wait_up(down, end)
            else:
                st["errors"].append({"error": str(e), "t": round(time.time() - t0, 1)})
                print("soak reader %s: %s" % (mnt, e), file=sys.stderr, flush=True)
        if time.time() - last >= STATS_EVERY_S:
            save_json(stats_path, st)
            last = time.time()
        time.sleep(rng.uniform(*READER_PAUSE_S))
    st["done"] = True
    save_json(stats_path, st)
    return 0


# ---- sampler ----------------------------------------------------------------

# One sample of a process: these fields, in this order in the TSV. files is
# the count of files in the mount's model (what the mount holds), mnt_fds
# the process's fds on regular files of the mount's lower, deleted_fds
# those on files unlinked since (-1: not a mount's daemon).
FIELDS = ("rss_kib", "hwm_kib", "fds", "threads", "files", "mnt_fds", "deleted_fds")


def fd_kinds(pid, mnt):
    """(fds, fds on regular files under mnt, fds on deleted files under mnt)."""
    fds = os.listdir("/proc/%d/fd" % pid)
    if mnt is None:
        return len(fds), -1, -1
    on = deleted = 0
    for fd in fds:
        try:
            t = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if not t.startswith(mnt + "/"):
            continue
        if t.endswith(" (deleted)"):
            deleted += 1
            continue
        try:
            if stat.S_ISREG(os.stat("/proc/%d/fd/%s" % (pid, fd)).st_mode):
                on += 1
        except OSError:
            pass
    return len(fds), on, deleted


def count_files(d):
    if d is None:
        return -1
    return sum(len(fns) for _, _, fns in os.walk(d))


def proc_sample(pid, mnt, model):
    """A dict of FIELDS for pid, or None if it is gone."""
    try:
        v = {}
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                k, _, rest = line.partition(":")
                if k in ("VmRSS", "VmHWM", "Threads"):
                    v[k] = int(rest.split()[0])
        fds, on, deleted = fd_kinds(pid, mnt)
    except (OSError, ValueError):
        return None
    return {"rss_kib": v.get("VmRSS", 0), "hwm_kib": v.get("VmHWM", 0), "fds": fds,
            "threads": v.get("Threads", 0), "files": count_files(model),
            "mnt_fds": on, "deleted_fds": deleted}


def thread_names(pid):
    names = {}
    try:
        for t in os.listdir("/proc/%d/task" % pid):
            try:
                with open("/proc/%d/task/%s/comm" % (pid, t)) as f:
                    c = f.read().strip()
            except OSError:
                continue
            names[c] = names.get(c, 0) + 1
    except OSError:
        pass
    return names


def ctl_status(ctl):
    try:
        r = subprocess.run([ctl, "status", "--json"], capture_output=True, timeout=10)
        return {m.get("pid"): m for m in json.loads(r.stdout.decode()).get("mounts", [])}
    except (OSError, ValueError, subprocess.SubprocessError):
        return {}


def worker_totals(stats_dir):
    t = {"wops": 0, "wbytes": 0, "fsyncs": 0, "fsync_max_ms": 0.0, "werr": 0,
         "live": 0, "live_diffs": 0, "reads": 0, "rerr": 0, "cut": 0}
    for n in sorted(os.listdir(stats_dir)):
        if not n.endswith(".json"):
            continue
        try:
            with open(os.path.join(stats_dir, n)) as f:
                s = json.load(f)
        except (OSError, ValueError):
            continue
        if s.get("kind") == "writer":
            t["wops"] += sum(s["ops"].values())
            t["wbytes"] += s["bytes"]
            t["fsyncs"] += len(s["fsync_ms"])
            t["fsync_max_ms"] = max([t["fsync_max_ms"]] + s["fsync_ms"])
            t["werr"] += len(s["errors"])
            t["cut"] += len(s.get("cut_off", []))
            t["live"] += s["live_checks"]
            t["live_diffs"] += len(s["live_diffs"])
        else:
            t["reads"] += s["reads"]
            t["rerr"] += len(s["errors"])
            t["cut"] += s.get("cut_off", 0)
    return t


def sample_main(a):
    out, t0, run_t0, minutes, ctl, stats_dir = a[:6]
    t0, run_t0, minutes = float(t0), float(run_t0), int(minutes)
    specs = []  # (name, pid or @file, mnt, model)
    for spec in a[6:]:
        name, _, rest = spec.partition("=")
        pid, mnt, model = (rest.split(":") + [None, None])[:3]
        specs.append((name, pid, mnt, model))

    def resolve():
        out = []
        for name, pid, mnt, model in specs:
            if pid.startswith("@"):
                try:
                    with open(pid[1:]) as pf:
                        pid = pf.read().strip()
                except OSError:
                    pid = "0"
            out.append((name, int(pid or 0), mnt, model))
        return out

    procs = resolve()
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    peak_threads = {p[0]: 0 for p in procs}
    names_at_peak = {}
    gone, dumped = set(), set()
    prev = {}
    minute = 1
    with open(out, "a") as f:
        while not stop:
            now = time.time()
            cur = {}
            was = {p[0]: p[1] for p in procs}
            procs = resolve()
            for name, pid, mnt, model in procs:
                if pid != was.get(name):
                    gone.discard(name)
                    f.write("%.3f\trestart\t%s\t%d\n" % (now, name, pid))
                    print("[%4ds] %s is now pid %d" % (now - t0, name, pid),
                          file=sys.stderr, flush=True)
                s = proc_sample(pid, mnt, model)
                if s is None:
                    if name not in gone:
                        gone.add(name)
                        f.write("%.3f\t%s\t%d\tgone\n" % (now, name, pid))
                        print("[%4ds] %s (pid %d) is gone" % (now - t0, name, pid),
                              file=sys.stderr, flush=True)
                    continue
                cur[name] = s
                f.write("%.3f\t%s\t%d\t%s\n" % (now, name, pid,
                                                  "\t".join(str(s[k]) for k in FIELDS)))
                if s["threads"] > peak_threads[name]:
                    peak_threads[name] = s["threads"]
                    names_at_peak[name] = {"threads": s["threads"], "names": thread_names(pid)}
                    save_json(out + ".threads", names_at_peak)
            if minute <= minutes and now >= run_t0 + 60 * minute:
                f.write("%.3f\tminute\t%d\n" % (now, minute))
                st = ctl_status(ctl)
                for name, pid in print_minute(now - t0, minute, procs, cur, st, prev, stats_dir):
                    f.write("%.3f\tstall\t%s\t%d\n" % (now, name, minute))
                    if name not in dumped:
                        dumped.add(name)
                        stall_dump("%s.stall-%s.txt" % (out, name), name, pid, st.get(pid))
                prev = st
                minute += 1
            f.flush()
            time.sleep(max(0.0, SAMPLE_S - (time.time() - now)))
    return 0


def print_minute(ts, minute, procs, cur, st, prev, stats_dir):
    """The minute's lines; returns the daemons that flushed nothing in the
    minute while data stayed queued (st, prev: this and last minute's status
    by pid)."""
    stalled = []
    for name, pid, _, _ in procs:
        s = cur.get(name)
        if s is None:
            print("[%4ds] min %2d  %-7s pid %d gone" % (ts, minute, name, pid), file=sys.stderr)
            continue
        line = "[%4ds] min %2d  %-7s pid %-7d rss %5.1f MiB  threads %3d  fds %4d" % (
            ts, minute, name, pid, s["rss_kib"] / 1024.0, s["threads"], s["fds"])
        if s["files"] >= 0:
            line += " (%4d on %4d files, %2d deleted)" % (s["mnt_fds"], s["files"], s["deleted_fds"])
        m, p = st.get(pid), prev.get(pid)
        if m is not None:
            line += "  queued %4.1f MiB  written %6.1f MiB  %.2f MB/s  %s%s" % (
                m.get("queued_bytes", 0) / MIB, m.get("written_bytes", 0) / MIB,
                m.get("flush_rate", 0) / 1e6, m.get("state", "?"),
                "  errors %s" % m["errors"] if m.get("errors") else "")
            if p is not None and p.get("queued_bytes") and m.get("queued_bytes") and \
                    m.get("written_bytes") == p.get("written_bytes"):
                line += "  STALLED: nothing flushed in a minute"
                stalled.append((name, pid))
        print(line, file=sys.stderr)
    t = worker_totals(stats_dir)
    print("[%4ds] min %2d  workers: %d writer ops, %.1f MiB written, %d fsyncs (max %.1f s), "
          "%d live checks (%d diffs), %d reads, errors %d%s" % (
              ts, minute, t["wops"], t["wbytes"] / MIB, t["fsyncs"], t["fsync_max_ms"] / 1000.0,
              t["live"], t["live_diffs"], t["reads"], t["werr"] + t["rerr"],
              ", %d ops cut off by the kill" % t["cut"] if t["cut"] else ""),
          file=sys.stderr, flush=True)
    return stalled


def stall_dump(path, name, pid, st):
    """Where a stalled daemon's threads are, and what the arbiter says."""
    here = os.path.dirname(os.path.abspath(__file__))
    with open(path, "w") as f:
        f.write("# %s (pid %d) flushed nothing for a minute at %s\n# status: %s\n" % (
            name, pid, time.strftime("%Y-%m-%dT%H:%M:%S"), json.dumps(st)))
        f.flush()
        arb = os.environ.get("SLOWMEDIA_ARBITER_SOCKET")
        if arb:
            f.write("# the arbiter:\n")
            f.flush()
            subprocess.run([sys.executable, os.path.join(here, "smctl.py"), arb], stdout=f,
                           stderr=subprocess.STDOUT, timeout=10)
        for t in sorted(os.listdir("/proc/%d/task" % pid)):
            for what in ("comm", "wchan", "stack"):
                try:
                    with open("/proc/%d/task/%s/%s" % (pid, t, what)) as g:
                        f.write("## %s %s: %s\n" % (t, what, g.read().strip()))
                except OSError:
                    pass
        f.flush()
        try:
            subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt"],
                           stdout=f, stderr=subprocess.DEVNULL, timeout=60)
        except (OSError, subprocess.SubprocessError):
            f.write("# (no gdb backtraces)\n")
    print("         %s: its threads and the arbiter's view are in %s" % (name, path),
          file=sys.stderr, flush=True)


# ---- check ------------------------------------------------------------------

def walk_files(root):
    out = {}
    for dp, dns, fns in os.walk(root):
        rel = os.path.relpath(dp, root)
        dns[:] = [d for d in dns if d != "lost+found"]
        for n in fns:
            p = os.path.join(dp, n)
            out[os.path.normpath(os.path.join(rel, n))] = p
    return out


def compare_file(a, b):
    """None if equal, else a description of the difference."""
    sa, sb = os.path.getsize(a), os.path.getsize(b)
    if sa == sb:
        with open(a, "rb") as fa, open(b, "rb") as fb:
            while True:
                x, y = fa.read(CMP_BLOCK), fb.read(CMP_BLOCK)
                if x != y:
                    break
                if not x:
                    return None
    want, got = read_file(a, False), read_file(b, False)
    bad, zeros = diff_blocks(want, got)
    return {"model_size": sa, "medium_size": sb, "first_diff": first_diff(want, got),
            "blocks": bad, "zero_blocks": zeros}


def save_diffs(diffs, mf, df, save):
    import shutil
    os.makedirs(save, exist_ok=True)
    for d in diffs[:MAX_SAVED]:
        flat = d["path"].replace("/", "_")
        for src, tag in ((mf.get(d["path"]), "model"), (df.get(d["path"]), "medium")):
            if src:
                shutil.copyfile(src, os.path.join(save, "%s.%s" % (flat, tag)))
    print("  the first %d differing files (model and medium) are in %s" % (
        min(len(diffs), MAX_SAVED), save))


def check_main(a):
    model, medium, out, save = a[:4]
    excluded = set()
    for sp in a[4:]:
        try:
            with open(sp) as f:
                s = json.load(f)
        except (OSError, ValueError):
            continue
        if s.get("kind") == "writer":
            rel = os.path.relpath(s["dir"], os.path.dirname(os.path.dirname(s["dir"])))
            excluded.update(os.path.join(rel, n) for n in s.get("excluded", []))
    mf, df = walk_files(model), walk_files(medium)
    diffs = []
    nbytes = 0
    for rel in sorted(set(mf) | set(df)):
        if rel in excluded:
            continue
        if rel not in df:
            diffs.append({"path": rel, "what": "missing on the medium",
                          "model_size": os.path.getsize(mf[rel])})
            continue
        if rel not in mf:
            diffs.append({"path": rel, "what": "on the medium, not in the model",
                          "medium_size": os.path.getsize(df[rel])})
            continue
        d = compare_file(mf[rel], df[rel])
        nbytes += os.path.getsize(mf[rel])
        if d is not None:
            d.update({"path": rel, "what": "content differs"})
            diffs.append(d)
    for d in diffs[:MAX_DIFF_LINES]:
        print("  DIFF %s: %s" % (d["path"], ", ".join(
            "%s %s" % (k, v) for k, v in d.items() if k not in ("path",))))
    if len(diffs) > MAX_DIFF_LINES:
        print("  ... and %d more differences (all in %s)" % (len(diffs) - MAX_DIFF_LINES, out))
    if diffs and save != "-":
        save_diffs(diffs, mf, df, save)
    res = {"files": len(mf), "medium_files": len(df), "bytes": nbytes,
           "excluded": sorted(excluded), "differences": len(diffs), "diffs": diffs}
    save_json(out, res)
    print("model check: %d files (%.1f MiB) in the model, %d on the media, %d excluded, "
          "%d differences" % (len(mf), nbytes / MIB, len(df), len(excluded), len(diffs)))
    return 1 if diffs else 0


# ---- report -----------------------------------------------------------------

def load_samples(path):
    """{name: [sample dicts with t, pid]}, {minute: t}, {name: t gone}, {mark: t}."""
    series, minutes, gone, marks = {}, {}, {}, {}
    with open(path) as f:
        for line in f:
            p = line.rstrip("\n").split("\t")
            if p[1] == "minute":
                minutes[int(p[2])] = float(p[0])
            elif p[1] == "mark":
                marks[p[2]] = float(p[0])
            elif p[1] == "stall":
                marks.setdefault("stall:" + p[2], []).append(int(p[3]))
            elif p[1] == "restart":
                marks.setdefault("restart:" + p[2], []).append((float(p[0]), int(p[3])))
            elif len(p) > 3 and p[3] == "gone":
                gone[p[1]] = float(p[0])
            elif len(p) == 3 + len(FIELDS):
                s = dict(zip(FIELDS, map(int, p[3:])))
                s.update({"t": float(p[0]), "pid": int(p[2])})
                series.setdefault(p[1], []).append(s)
                gone.pop(p[1], None)  # started again (soak.sh --kill-at)
    return series, minutes, gone, marks


def at(series, t):
    """The sample of series nearest to time t."""
    return min(series, key=lambda s: abs(s["t"] - t))


def after(series, t):
    """The first sample of series at or after t, or None."""
    later = [s for s in series if s["t"] >= t]
    return later[0] if later else None


def other_fds(s):
    return s["fds"] - max(0, s["mnt_fds"]) - max(0, s["deleted_fds"])


class Bounds:
    def __init__(self):
        self.list = []

    def add(self, name, what, value, limit, unit):
        self.list.append({"process": name, "bound": what, "value": value, "limit": limit,
                          "unit": unit, "pass": value is not None and value <= limit})

    def fail(self, name, what):
        self.list.append({"process": name, "bound": what, "value": None, "limit": None,
                          "unit": "", "pass": False})


def process_record(name, kind, s, minutes, tnames, gone):
    keep = ("rss_kib", "fds", "threads", "files", "mnt_fds", "deleted_fds")
    pids = []
    for x in s:
        if x["pid"] not in pids:
            pids.append(x["pid"])
    return {"process": name, "kind": kind, "pid": s[0]["pid"], "pids": pids, "samples": len(s),
            "peak_rss_kib": max(x["rss_kib"] for x in s), "vmhwm_kib": max(x["hwm_kib"] for x in s),
            "peak_fds": max(x["fds"] for x in s), "peak_threads": max(x["threads"] for x in s),
            "thread_names_at_peak": tnames.get(name, {}).get("names", {}), "gone_at": gone.get(name),
            "per_minute": [dict({"minute": k}, **{f: at(s, t)[f] for f in keep})
                           for k, t in sorted(minutes.items())]}


def process_bounds(meta, series, minutes, gone, marks, tnames):
    """The per-process records and their bounds."""
    b, procs = Bounds(), []
    rss_slack = meta["rss_slack_mib"] * MIB
    fd_slack, th_slack = meta["fd_slack"], meta["thread_slack"]
    first_t = minutes.get(1)
    last_t = minutes[max(minutes)] if minutes else None
    for name, kind in meta["names"].items():
        s = series.get(name, [])
        if not s:
            b.fail(name, "sampled")
            continue
        rec = process_record(name, kind, s, minutes, tnames, gone)
        procs.append(rec)
        daemon = kind == "daemon"
        b.add(name, "peak RSS (VmRSS samples, VmHWM) <= %s" % (
            "queue + %d MiB" % meta["rss_slack_mib"] if daemon else "%d MiB" % meta["rss_slack_mib"]),
            max(rec["peak_rss_kib"], rec["vmhwm_kib"]),
            ((meta["queue_bytes"] if daemon else 0) + rss_slack) // KIB, "KiB")
        if first_t is None:
            b.fail(name, "a first minute sampled")
            continue
        f1, fl = at(s, first_t), at(s, last_t)
        rec.update({"first": f1, "last": fl})
        if daemon:
            # An fd per lower file the kernel knows is the daemon's design
            # (bounded there by RLIMIT_NOFILE); the rest must not grow.
            b.add(name, "fds not on the mount's files, last minute <= first minute's + %d" % fd_slack,
                  other_fds(fl), other_fds(f1) + fd_slack, "fds")
            b.add(name, "peak threads <= max_threads + %d" % th_slack, rec["peak_threads"],
                  meta["max_threads"] + th_slack, "threads")
            d = after(s, marks["drained"]) if "drained" in marks else None
            rec["drained"] = d
            if d is None:
                if not meta["early"]:  # else the stall is what failed
                    b.fail(name, "a sample after the drain")
            else:
                b.add(name, "fds on the mount's files after the drain <= its files", d["mnt_fds"],
                      d["files"], "fds")
                b.add(name, "fds on deleted files after the drain", d["deleted_fds"], 0, "fds")
        else:
            b.add(name, "fds at the last minute <= first minute's + %d" % fd_slack, fl["fds"],
                  f1["fds"] + fd_slack, "fds")
            b.add(name, "peak threads <= first minute's + 4", rec["peak_threads"],
                  f1["threads"] + 4, "threads")
        if gone.get(name) is not None and gone[name] < meta["run_end"]:
            b.fail(name, "alive through the run")
        if daemon:
            stalls = marks.get("stall:" + name, [])
            rec["stalled_minutes"] = stalls
            b.add(name, "minutes in which nothing was flushed while data was queued", len(stalls),
                  0, "minutes")
    return procs, b.list


def load_workers(stats_dir):
    workers = {"writer": [], "reader": []}
    for n in sorted(os.listdir(stats_dir)):
        if n.endswith(".json"):
            with open(os.path.join(stats_dir, n)) as f:
                s = json.load(f)
            s["name"] = n[:-5]
            workers[s["kind"]].append(s)
    return workers["writer"], workers["reader"]


def workers_summary(writers, readers):
    fsync = [v for w in writers for v in w["fsync_ms"]]
    reads = [v for r in readers for v in r["read_ms"]]
    opens = [v for r in readers for v in r.get("open_ms", [])]
    ops = {}
    for w in writers:
        for k, v in w["ops"].items():
            ops[k] = ops.get(k, 0) + v
    return {
        "writer_ops": sum(ops.values()), "ops": ops,
        "written_mib": round(sum(w["bytes"] for w in writers) / MIB, 1),
        "fsyncs": len(fsync), "fsync_p50_ms": pct(fsync, 50), "fsync_p99_ms": pct(fsync, 99),
        "fsync_max_ms": max(fsync) if fsync else None,
        "live_checks": sum(w["live_checks"] for w in writers),
        "live_diffs": sum(len(w["live_diffs"]) for w in writers),
        "writer_errors": sum(len(w["errors"]) for w in writers),
        "errors": [e for w in writers for e in w["errors"]][:50],
        "files_end": sum(w["files"] for w in writers),
        "model_mib_end": round(sum(w["model_bytes"] for w in writers) / MIB, 1),
        "reads": len(reads), "read_mib": round(sum(r["bytes"] for r in readers) / MIB, 1),
        "read_p50_ms": pct(reads, 50), "read_p99_ms": pct(reads, 99),
        "read_max_ms": max(reads) if reads else None,
        "open_p50_ms": pct(opens, 50), "open_p99_ms": pct(opens, 99),
        "open_max_ms": max(opens) if opens else None,
        "reader_errors": sum(len(r["errors"]) for r in readers),
        "cut_off_writer_ops": sum(len(w.get("cut_off", [])) for w in writers),
        "cut_off_reads": sum(r.get("cut_off", 0) for r in readers),
        "down_s_max": max([w.get("down_s", 0.0) for w in writers + readers] or [0.0]),
        "reader_enoent": sum(r["enoent"] for r in readers),
        "unfinished": [w["name"] for w in writers + readers if not w.get("done")],
    }


def slow_reads(writers, readers):
    """The reads of SLOW_S or more, each with what its file's writer was doing
    on that file meanwhile (an op of SLOW_S or more overlapping it)."""
    ops = {}
    for w in writers:
        for o in w.get("slow_ops", []):
            for path in o["paths"]:
                ops.setdefault(path, []).append(o)
    out = {"reads": 0, "open_slow": 0, "during_writer_op": {}, "no_slow_writer_op": 0,
           "worst": []}
    for r in readers:
        for s in r.get("slow", []):
            out["reads"] += 1
            if s["open_ms"] >= SLOW_S * 1000.0:
                out["open_slow"] += 1
            t0 = s["t1"] - s["ms"] / 1000.0
            over = [o for o in ops.get(s["path"], []) if o["t0"] < s["t1"] and o["t1"] > t0]
            for o in over[:1]:
                out["during_writer_op"][o["op"]] = out["during_writer_op"].get(o["op"], 0) + 1
            if not over:
                out["no_slow_writer_op"] += 1
            out["worst"].append(dict(s, writer_ops=[o["op"] for o in over]))
    out["worst"] = sorted(out["worst"], key=lambda s: -s["ms"])[:20]
    return out


def verdicts(meta, tot, check):
    """The checks; "pass" None: skipped, the run having ended early (a stall,
    itself a failed check)."""
    out = []
    early = "skipped: the run ended early"

    def v(what, ok, detail):
        out.append({"check": what, "pass": None if detail == early else bool(ok),
                    "detail": detail})

    v("model check (images mounted read-only)", check is not None and check["differences"] == 0,
      (early if meta["early"] else "no result") if check is None else
      "%d files, %d differences" % (check["files"], check["differences"]))
    v("live read-back checks through the mounts", tot["live_diffs"] == 0,
      "%d checks, %d differences" % (tot["live_checks"], tot["live_diffs"]))
    v("no errors seen by writers and readers", tot["writer_errors"] + tot["reader_errors"] == 0,
      "writers %d, readers %d" % (tot["writer_errors"], tot["reader_errors"]))
    left = sorted(set(tot["unfinished"]) | set(meta["hung"]))
    v("every worker finished", not left, ", ".join(left) or "all")
    if meta.get("stalled"):
        v("the flushers kept going", False, meta["stalled"])
    for k, rc in sorted(meta["drain_rc"].items()):
        v("slowmediactl drain %s" % k, rc == 0, (early if meta["early"] else "not run")
          if rc is None else "rc %s, %.1f s" % (rc, meta["drain_s"][k]))
    for k, rc in sorted(meta["exit"].items()):
        if rc is None:
            v("daemon %s exit status" % k, False, early if meta["early"] else "not reached")
        elif rc == "held":
            v("daemon %s exit status" % k, True, "killed after %.0f s: another mount namespace "
              "still had the mount (its queue was drained)" % meta["daemon_exit_s"][k])
        else:
            v("daemon %s exit status" % k, rc == 0, "rc %s%s" % (
                rc, ", %.0f s after the umount: another mount namespace had the mount"
                % meta["daemon_exit_s"][k] if meta["foreign_ns"].get(k) else ""))
    for k, ok in sorted(meta["released"].items()):
        if not ok:
            v("note: the ext2 of %s was not shut down before the check" % k, True,
              "another mount namespace still had it mounted; the image was checked as it was")
    for k, rc in sorted(meta["fsck"].items()):
        if rc is None:
            v("e2fsck -fn %s" % k, False, early if meta["early"] else "not run")
        elif meta["released"][k]:
            v("e2fsck -fn %s" % k, rc == 0, "rc %s" % rc)
        else:  # still mounted read-write in another namespace: not conclusive
            v("e2fsck -fn %s" % k, True, "rc %s, with the ext2 still mounted in another mount "
              "namespace (not conclusive)" % rc)
    v("one arbiter through the run", meta["arbiter_same"], meta["arbiter_note"])
    k = meta.get("kill")
    if k:
        v("kill -9 of %s at minute %s, mounted again over the same spool" % (k["mount"], k["at_min"]),
          k.get("remounted") is True,
          "pid %s killed, pid %s mounted %s s later (%s); %d writer ops and %d reads cut off, "
          "their files left out of the check" % (
              k.get("old_pid"), k.get("new_pid"), k.get("down_s"),
              k.get("replay") or "no replay line", tot["cut_off_writer_ops"], tot["cut_off_reads"]))
    return out


def report_main(a):
    """report META_JSON SAMPLES STATS_DIR CHECK_JSON OUT_JSON

    META_JSON (written by soak.sh, copied into the JSON): names ({name:
    "daemon"|"arbiter"}), queue_bytes, max_threads, rss_slack_mib, fd_slack,
    thread_slack, minutes, run_end, exit, drain_s, drain_rc, fsck ({mount:
    ...}), hung, arbiter_same, arbiter_note, opts.
    """
    meta_path, samples, stats_dir, check_path, out = a
    with open(meta_path) as f:
        meta = json.load(f)
    series, minutes, gone, marks = load_samples(samples)
    try:
        with open(samples + ".threads") as f:
            tnames = json.load(f)
    except (OSError, ValueError):
        tnames = {}
    procs, bounds = process_bounds(meta, series, minutes, gone, marks, tnames)
    writers, readers = load_workers(stats_dir)
    tot = workers_summary(writers, readers)
    tot["slow_reads"] = slow_reads(writers, readers)
    try:
        with open(check_path) as f:
            check = json.load(f)
    except (OSError, ValueError):
        check = None
    checks = verdicts(meta, tot, check)
    ok = all(b["pass"] for b in bounds) and all(c["pass"] is not False for c in checks) \
        and not meta["early"]
    res = dict(meta)
    res.update({"scenario": "soak", "processes": procs, "bounds": bounds, "checks": checks,
                "workers": tot, "pass": ok,
                "check": check and {k: v for k, v in check.items() if k != "diffs"},
                "diffs": check and check["diffs"][:200]})
    save_json(out, res)
    print_report(procs, bounds, checks, tot, meta)
    print("soak: %s" % ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


def fmt_kib(v):
    return "%.1f MiB" % (v / 1024.0)


def fds_cell(s):
    if s is None:
        return "-"
    if s["files"] < 0:
        return str(s["fds"])
    return "%d (%d/%d/%d)" % (s["fds"], s["mnt_fds"], s["files"], s["deleted_fds"])


def print_report(procs, bounds, checks, tot, meta):
    print()
    print("soak: %d min, 2 mounts on one head (%s), %d writers, %d readers; slowmedia -o %s" % (
        meta["minutes"], meta["profile"], meta["writers"], meta["readers"], meta["opts"]))
    print("fds: total (on the mount's files / files the mount holds / on deleted files)")
    hdr = ("process", "pid", "peak RSS", "VmHWM", "threads 1st/last/peak", "fds 1st minute",
           "fds last minute", "fds after drain", "peak fds")
    fmt = "%-8s %7s %9s %9s %21s %17s %17s %16s %8s"
    print(fmt % hdr)
    for p in procs:
        f1, fl = p.get("first"), p.get("last")
        print(fmt % (
            p["process"], p["pid"], fmt_kib(p["peak_rss_kib"]), fmt_kib(p["vmhwm_kib"]),
            "%s/%s/%d" % (f1 and f1["threads"], fl and fl["threads"], p["peak_threads"]),
            fds_cell(f1), fds_cell(fl), fds_cell(p.get("drained")), p["peak_fds"]))
    for p in procs:
        if len(p.get("pids", [])) > 1:
            print("%s: pids %s (started again: the table spans all of them, first minute of "
                  "the first, last minute of the last)" % (
                      p["process"], " then ".join(str(x) for x in p["pids"])))
    for p in procs:
        print("threads of %s at its peak: %s" % (p["process"], ", ".join(
            "%s %d" % kv for kv in sorted(p["thread_names_at_peak"].items()))))
    ops = ", ".join("%s %d" % kv for kv in sorted(tot["ops"].items()))
    print("writers: %d ops (%s), %.1f MiB written; %d fsyncs: p50 %s ms, p99 %s ms, max %s ms; "
          "at the end %d files, %.1f MiB" % (
              tot["writer_ops"], ops, tot["written_mib"], tot["fsyncs"], tot["fsync_p50_ms"],
              tot["fsync_p99_ms"], tot["fsync_max_ms"], tot["files_end"], tot["model_mib_end"]))
    print("readers: %d reads, %.1f MiB; open+read p50 %s ms, p99 %s ms, max %s ms (of which "
          "open+fstat p50 %s ms, p99 %s ms, max %s ms); %d vanished under them" % (
              tot["reads"], tot["read_mib"], tot["read_p50_ms"], tot["read_p99_ms"],
              tot["read_max_ms"], tot["open_p50_ms"], tot["open_p99_ms"], tot["open_max_ms"],
              tot["reader_enoent"]))
    sr = tot["slow_reads"]
    if sr["reads"]:
        print("readers: %d reads took %g s or more (%d of them in open+fstat); %s; "
              "%d with no slow op of the file's writer on it" % (
                  sr["reads"], SLOW_S, sr["open_slow"],
                  ", ".join("%d during the writer's %s of the file" % (n, op)
                            for op, n in sorted(sr["during_writer_op"].items())) or "none during a writer's op",
                  sr["no_slow_writer_op"]))
    for k in sorted(meta["drain_s"]):
        if meta["drain_s"][k] is not None and meta["daemon_exit_s"][k] is not None:
            print("%s: drain %.1f s, then umount %.1f s and the daemon's exit %.1f s" % (
                k, meta["drain_s"][k], meta["umount_s"][k], meta["daemon_exit_s"][k]))
    sr = meta.get("slow_requests") or {}
    if any(v is not None for v in sr.values()):
        print("FUSE requests past req_bound= (fsync and backpressured writes aside; the last "
              "daemon of each mount): %s" % ", ".join("%s %s" % kv for kv in sorted(sr.items())))
    for b in bounds:
        if b["value"] is None:
            val = "missing"
        elif b["unit"] == "KiB":
            val = "%s <= %s" % (fmt_kib(b["value"]), fmt_kib(b["limit"]))
        else:
            val = "%s <= %s" % (b["value"], b["limit"])
        print("%s  %-8s %s: %s" % ("pass" if b["pass"] else "FAIL", b["process"], b["bound"], val))
    for c in checks:
        print("%s  %s: %s" % ({True: "pass", False: "FAIL", None: "skip"}[c["pass"]],
                              c["check"], c["detail"]))


def main(argv):
    cmds = {"writer": (writer_main, 6), "reader": (reader_main, 4), "sample": (sample_main, 7),
            "check": (check_main, 4), "report": (report_main, 5)}
    if len(argv) < 2 or argv[1] not in cmds or len(argv) - 2 < cmds[argv[1]][1]:
        print(__doc__, file=sys.stderr)
        return 2
    return cmds[argv[1]][0](argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
