#!/usr/bin/env python3
"""report.py RESULTS.tsv JSON_OUT [--columns A,B,...]: the side-by-side table and the JSON.

--columns names the columns (default raw,mitigation,slowmedia); the first is
the reference of the ratio columns (sm/raw: each other column's median over
the first's).

RESULTS.tsv holds what the harness recorded, one tab-separated line each:

  R scenario metric unit column value timed_out   one run of one figure
  F scenario metric column SCEN:NUM SCEN:DEN      a ratio figure, made here:
                                                  run i = num[i] / den[i]
                                                  (or / median(den) when the
                                                  run counts differ)
  N scenario column reason                        a column (or "-": the whole
                                                  scenario) that did not run

A run that hit its time bound is recorded as the bound with timed_out=1: the
figure is a lower bound, printed as ">VALUE" and flagged in the JSON.
"""
import json
import statistics
import sys

COLUMNS = ("raw", "mitigation", "slowmedia")
# How the ratio columns name the default columns.
SHORT = {"mitigation": "mit", "slowmedia": "sm", "slowmedia_arboff": "off"}

# The figures of a scenario, listed (all null) when the whole scenario could
# not run, so that readers of the JSON find every name.
SCENARIO_METRICS = {
    "fastread": [("fast_read_factor_dd", "x"), ("fast_read_factor_dd_small", "x")],
    "cp": [("fast_read_factor_cp", "x")],
    "randread": [("randread_s_T%d_B%d" % (t, b), "s") for t in (1, 4, 10) for b in (4, 8, 16, 32)],
    "seqread": [("slow_seq_read_mb_s", "MB/s"), ("slow_dev_read_mb_s", "MB/s")],
    "collateral": [(m + sfx, u) for sfx in ("", "_small") for m, u in (
        ("fast_fsync_4k_ms", "ms"), ("fast_fsync_4k_factor", "x"), ("fast_write_1g_s", "s"),
        ("fast_write_1g_factor", "x"), ("global_sync_s", "s"), ("umount_s", "s"),
        ("dirty_writeback_peak_mb", "MB"), ("flush_mb_s", "MB/s"), ("flush_vs_bw", "x"))],
    "slowread": [("slow_read_p50_ms", "ms"), ("slow_read_p99_ms", "ms"),
                 ("slow_read_20mb_factor", "x"), ("slow_read_4k_direct_ms", "ms"),
                 ("slow_read_4k_direct_cold_ms", "ms"), ("flush_mb_s", "MB/s"),
                 ("flush_vs_bw", "x"), ("writer_elapsed_vs_ideal", "x")],
    "dbench": [("dbench_mb_s", "MB/s"), ("bonnie_block_write_kb_s", "KB/s")],
}


def summary(runs, timed):
    if not runs:
        return None
    return {
        "median": round(statistics.median(runs), 4),
        "min": round(min(runs), 4),
        "max": round(max(runs), 4),
        "runs": [round(r, 4) for r in runs],
        "timed_out": any(timed),
    }


def load(path):
    order, units, runs, timed, ratios, notes = [], {}, {}, {}, [], {}
    with open(path) as f:
        for line in f:
            p = line.rstrip("\n").split("\t")
            if p[0] == "R":
                _, scen, metric, unit, col, value, to = p
                key = (scen, metric)
                if key not in units:
                    order.append(key)
                    units[key] = unit
                runs.setdefault((key, col), []).append(float(value))
                timed.setdefault((key, col), []).append(to == "1")
            elif p[0] == "F":
                ratios.append(p[1:])
            elif p[0] == "N":
                notes.setdefault(p[1], {})[p[2]] = p[3]
    for scen, metric, col, num, den in ratios:
        nk, dk = tuple(num.split(":", 1)), tuple(den.split(":", 1))
        n, d = runs.get((nk, col)), runs.get((dk, col))
        if not n or not d:
            continue
        nt, dt = timed[(nk, col)], timed[(dk, col)]
        if len(n) == len(d):
            vals = [a / b for a, b in zip(n, d) if b > 0]
        else:
            m = statistics.median(d)
            vals = [a / m for a in n] if m > 0 else []
        key = (scen, metric)
        if key not in units:
            # Right after its numerator in the table.
            order.insert(order.index(nk) + 1 if nk in order else len(order), key)
            units[key] = "x"
        runs[(key, col)] = vals
        timed[(key, col)] = [a or b for a, b in zip(nt, dt + [False] * len(nt))]
    for scen, cols in notes.items():
        if "-" in cols:
            for metric, unit in SCENARIO_METRICS.get(scen, []):
                if (scen, metric) not in units:
                    order.append((scen, metric))
                    units[(scen, metric)] = unit
    return order, units, runs, timed, notes


def fmt_num(v):
    if abs(v) >= 100:
        return "%.0f" % v
    if abs(v) >= 10:
        return "%.1f" % v
    if abs(v) >= 1:
        return "%.2f" % v
    return "%.3f" % v


def fmt_cell(s):
    if s is None:
        return "-"
    gt = ">" if s["timed_out"] else ""
    if len(s["runs"]) == 1:
        return gt + fmt_num(s["median"])
    return "%s%s [%s-%s]" % (gt, fmt_num(s["median"]), fmt_num(s["min"]), fmt_num(s["max"]))


def fmt_ratio(a, b):
    if a is None or b is None or b["median"] == 0:
        return "-"
    r = a["median"] / b["median"]
    # A bound over a bound says nothing; a measured value over a bound is
    # an upper bound of the ratio.
    if a["timed_out"] and b["timed_out"]:
        return "?"
    return ("<" if b["timed_out"] else ">" if a["timed_out"] else "") + fmt_num(r)


def main():
    cols = COLUMNS
    if len(sys.argv) > 4 and sys.argv[3] == "--columns":
        cols = tuple(sys.argv[4].split(","))
    order, units, runs, timed, notes = load(sys.argv[1])
    records, rows = [], []
    ref = cols[0]
    for key in order:
        scen, metric = key
        rec = {"scenario": scen, "metric": metric, "unit": units[key]}
        for col in cols:
            rec[col] = summary(runs.get((key, col), []), timed.get((key, col), []))
        scen_notes = notes.get(scen, {})
        why = {c: scen_notes.get(c, scen_notes.get("-")) for c in cols
               if rec[c] is None and (c in scen_notes or "-" in scen_notes)}
        if why:
            rec["notes"] = why
        records.append(rec)
        rows.append((metric, units[key]) + tuple(fmt_cell(rec[c]) for c in cols) +
                    tuple(fmt_ratio(rec[c], rec[ref]) for c in cols[1:]))
    with open(sys.argv[2], "w") as f:
        json.dump(records, f, indent=1)
        f.write("\n")

    head = (("metric", "unit") + cols +
            tuple("%s/%s" % (SHORT.get(c, c), SHORT.get(ref, ref)) for c in cols[1:]))
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    line = lambda r: "  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths)))
    print(line(head))
    print("  ".join("-" * w for w in widths))
    last = None
    for key, row in zip(order, rows):
        if last is not None and key[0] != last:
            print()
        last = key[0]
        print(line(row))
    for scen, cols in notes.items():
        for col, reason in cols.items():
            print("note: %s%s: %s" % (scen, "" if col == "-" else " [%s]" % col, reason))


if __name__ == "__main__":
    main()
