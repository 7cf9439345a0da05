#!/usr/bin/env python3
"""arbshares.py: the sampler and the report of tests/bench/arbiter-shares.sh.

  arbshares.py sample STATS ARB_SOCKET OUT INTERVAL_S NAME=MOUNTPOINT...
      Until SIGTERM, every INTERVAL_S: the wall time, then per NAME the
      bytes the medium got (slowdev's NAME.write_bytes, from its STATS file),
      the bytes and grants the arbiter gave the mount on MOUNTPOINT (its
      status `bytes`, `grants`), as one tab-separated line of OUT.
  arbshares.py report OUT WINDOWS JSON [PNG]
      WINDOWS: lines `PHASE START END NAME:PRIO:WEIGHT:EXPECTED...` (wall
      times). Per phase and window, each mount's share of the bytes both got
      in the window, its rate and its mean chunk (granted bytes / grants),
      and the head's total rate; per phase the median over the windows with
      min and max. Prints the table, writes the JSON and, when matplotlib
      can be imported, PNG: each mount's bytes on the medium since the start
      over time, and their sum, the phases shaded.
"""
import json
import os
import signal
import socket
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import smctl  # noqa: E402 (the line protocol's decoding)


def slowdev_stats(path):
    out = {}
    with open(path) as f:
        for line in f:
            k, _, v = line.strip().partition(" ")
            out[k] = v
    return out


def arbiter_bytes(path):
    """mountpoint -> (granted bytes, grants), from the arbiter's status."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2.0)
    out = {}
    try:
        s.connect(path)
        f = s.makefile("rb")
        f.readline()  # the greeting
        s.sendall(b"status\n")
        for raw in f:
            line = raw.decode("latin-1").rstrip("\n")
            if line == "ok" or line.startswith("error"):
                break
            _, fields = smctl.parse(line)
            mp = fields.get("mountpoint", "")
            out[mp] = (int(fields.get("bytes", "0")), int(fields.get("grants", "0")))
    except OSError:
        pass
    finally:
        s.close()
    return out


def sample(argv):
    stats, sock, out, interval = argv[0], argv[1], argv[2], float(argv[3])
    names = [a.split("=", 1) for a in argv[4:]]
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    with open(out, "w") as f:
        f.write("t\t" + "\t".join("%s_medium\t%s_granted\t%s_grants" % (n, n, n)
                                   for n, _ in names) + "\n")
        while not stop:
            t = time.time()
            try:
                st = slowdev_stats(stats)
            except OSError:
                st = {}
            arb = arbiter_bytes(sock)
            row = ["%.3f" % t]
            for n, mp in names:
                row.append(st.get(n + ".write_bytes", ""))
                g = arb.get(mp)
                row += [str(g[0]), str(g[1])] if g else ["", ""]
            f.write("\t".join(row) + "\n")
            f.flush()
            time.sleep(max(0.0, interval - (time.time() - t)))


def load_samples(path):
    with open(path) as f:
        head = f.readline().rstrip("\n").split("\t")
        rows = []
        for line in f:
            p = line.rstrip("\n").split("\t")
            if len(p) != len(head):
                continue
            rows.append({k: (float(v) if v else None) for k, v in zip(head, p)})
    return head, rows


def at(rows, key, t):
    """The counter KEY at time t, interpolated between samples."""
    prev = None
    for r in rows:
        if r.get(key) is None:
            continue
        if r["t"] >= t:
            if prev is None or r["t"] == prev["t"]:
                return r[key]
            f = (t - prev["t"]) / (r["t"] - prev["t"])
            return prev[key] + f * (r[key] - prev[key])
        prev = r
    return prev[key] if prev else None


def summarize(vals):
    vals = [v for v in vals if v is not None]
    if not vals:
        return None
    return {"median": round(statistics.median(vals), 4), "min": round(min(vals), 4),
            "max": round(max(vals), 4), "runs": [round(v, 4) for v in vals]}


def fmt(s, pct=False):
    if s is None:
        return "-"
    k = 100.0 if pct else 1.0
    f = "%.1f" if pct else "%.3f"
    if len(s["runs"]) == 1:
        return f % (s["median"] * k)
    return (f + " [" + f + "-" + f + "]") % (s["median"] * k, s["min"] * k, s["max"] * k)


def fmt1(s):
    if s is None:
        return "-"
    return "%.0f [%.0f-%.0f]" % (s["median"], s["min"], s["max"])


def report(argv):
    samples, windows, out_json = argv[0], argv[1], argv[2]
    png = argv[3] if len(argv) > 3 else None
    head, rows = load_samples(samples)
    phases = {}
    order = []
    with open(windows) as f:
        for line in f:
            p = line.split()
            if len(p) < 4:
                continue
            phase, t0, t1 = p[0], float(p[1]), float(p[2])
            mounts = [m.split(":") for m in p[3:]]
            if phase not in phases:
                order.append(phase)
                phases[phase] = {"mounts": mounts, "windows": []}
            phases[phase]["windows"].append((t0, t1))
    records, table = [], []
    for phase in order:
        ph = phases[phase]
        names = [m[0] for m in ph["mounts"]]
        per = {n: {"medium": [], "granted": [], "rate": [], "chunk": []} for n in names}
        total = []
        for t0, t1 in ph["windows"]:
            d = {}
            for n in names:
                for kind in ("medium", "granted", "grants"):
                    a, b = at(rows, "%s_%s" % (n, kind), t0), at(rows, "%s_%s" % (n, kind), t1)
                    d[n, kind] = b - a if a is not None and b is not None else None
            for kind in ("medium", "granted"):
                vals = [d[n, kind] for n in names]
                tot = sum(vals) if None not in vals else None
                for n in names:
                    per[n][kind].append(d[n, kind] / tot if tot else None)
            for n in names:
                if d[n, "medium"] is not None:
                    per[n]["rate"].append(d[n, "medium"] / 1e6 / (t1 - t0))
                if d[n, "grants"]:
                    per[n]["chunk"].append(d[n, "granted"] / d[n, "grants"] / 1024)
            if None not in [d[n, "medium"] for n in names]:
                total.append(sum(d[n, "medium"] for n in names) / 1e6 / (t1 - t0))
        win_s = round(statistics.median([b - a for a, b in ph["windows"]]), 2)
        for name, prio, weight, expected in ph["mounts"]:
            rec = {"scenario": "arbiter-shares", "phase": phase, "mount": name,
                   "prio": int(prio), "weight": int(weight), "expected_share": float(expected),
                   "window_s": win_s, "windows": len(ph["windows"]),
                   "share_medium": summarize(per[name]["medium"]),
                   "share_granted": summarize(per[name]["granted"]),
                   "medium_mb_s": summarize(per[name]["rate"]),
                   "chunk_kib": summarize(per[name]["chunk"])}
            records.append(rec)
            table.append((phase, name, prio, weight, "%.1f" % (100 * float(expected)),
                          fmt(rec["share_medium"], True), fmt(rec["share_granted"], True),
                          fmt(rec["medium_mb_s"]), fmt1(rec["chunk_kib"])))
        rec = {"scenario": "arbiter-shares", "phase": phase, "mount": "both",
               "window_s": win_s, "windows": len(ph["windows"]), "medium_mb_s": summarize(total)}
        records.append(rec)
        table.append((phase, "both", "", "", "", "", "", fmt(rec["medium_mb_s"]), ""))
    with open(out_json, "w") as f:
        json.dump(records, f, indent=1)
        f.write("\n")
    hdr = ("phase", "mount", "prio", "weight", "expect %", "share % (medium)",
           "share % (granted)", "MB/s (medium)", "chunk KiB")
    w = [max(len(str(r[i])) for r in table + [hdr]) for i in range(len(hdr))]
    print("  ".join(str(c).ljust(w[i]) if i < 2 else str(c).rjust(w[i]) for i, c in enumerate(hdr)))
    print("  ".join("-" * x for x in w))
    for r in table:
        print("  ".join(str(c).ljust(w[i]) if i < 2 else str(c).rjust(w[i]) for i, c in enumerate(r)))
    if png:
        plot(rows, head, phases, order, png)
    return 0


def plot(rows, head, phases, order, png):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot skipped: matplotlib is missing (Debian: python3-matplotlib)")
        return
    t0 = rows[0]["t"] if rows else 0
    fig, ax = plt.subplots(figsize=(10, 5))
    keys = [k for k in head[1:] if k.endswith("_medium")]
    full = [r for r in rows if None not in [r[k] for k in keys]]
    if full:
        base = {k: full[0][k] for k in keys}  # mkfs and filling wrote before
        for k in keys:
            ax.plot([r["t"] - t0 for r in full], [(r[k] - base[k]) / 1e6 for r in full],
                    label=k[:-len("_medium")])
        ax.plot([r["t"] - t0 for r in full],
                [sum(r[k] - base[k] for k in keys) / 1e6 for r in full],
                label="both", color="grey", linestyle="--", linewidth=1)
    shades = ["#dde8f6", "#f6e6dd", "#e2f3df", "#efe0f3"]
    for i, phase in enumerate(order):
        ws = phases[phase]["windows"]
        a, b = ws[0][0] - t0, ws[-1][1] - t0
        ax.axvspan(a, b, color=shades[i % len(shades)], zorder=0)
        desc = ", ".join("%s p%s w%s" % (m[0], m[1], m[2]) for m in phases[phase]["mounts"])
        ax.text((a + b) / 2, 0.98, "%s\n%s" % (phase, desc), transform=ax.get_xaxis_transform(),
                ha="center", va="top", fontsize=8)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("written to the medium since the start (MB)")
    ax.set_title("Two mounts on one head: bytes on each medium over time")
    ax.legend(loc="center right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    print("plot: " + png)


def main(argv):
    if len(argv) < 2 or argv[1] not in ("sample", "report"):
        print(__doc__, file=sys.stderr)
        return 2
    if argv[1] == "sample":
        sample(argv[2:])
        return 0
    return report(argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
