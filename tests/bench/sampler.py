#!/usr/bin/env python3
"""sampler.py OUT INTERVAL_S [MAJ:MIN ...]

Samples dirty data every INTERVAL_S until SIGTERM/SIGINT and keeps the peaks
in OUT (rewritten after every sample, so it is valid whenever it is read):

  meminfo_mb   peak of Dirty + Writeback from /proc/meminfo (whole machine)
  bdi_mb       peak of the sum over the given bdis of BdiReclaimable +
               BdiWriteback from /sys/kernel/debug/bdi/MAJ:MIN/stats (the
               dirty data attributable to the slow medium), -1 if debugfs
               is not readable
"""
import os
import signal
import sys
import time


def meminfo_kb():
    dirty = wb = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Dirty:"):
                dirty = int(line.split()[1])
            elif line.startswith("Writeback:"):
                wb = int(line.split()[1])
    return dirty + wb


def bdi_kb(bdis):
    total = 0
    for mm in bdis:
        try:
            with open("/sys/kernel/debug/bdi/%s/stats" % mm) as f:
                for line in f:
                    key, _, rest = line.partition(":")
                    if key in ("BdiReclaimable", "BdiWriteback"):
                        total += int(rest.split()[0])
        except OSError:
            return -1
    return total


def main():
    out, interval, bdis = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    peak_mem = peak_bdi = -1
    while not stop:
        peak_mem = max(peak_mem, meminfo_kb())
        b = bdi_kb(bdis) if bdis else -1
        peak_bdi = max(peak_bdi, b) if b >= 0 else peak_bdi
        tmp = out + ".tmp"
        with open(tmp, "w") as f:
            f.write("meminfo_mb=%.1f bdi_mb=%.1f\n"
                    % (peak_mem / 1024.0, peak_bdi / 1024.0 if peak_bdi >= 0 else -1))
        os.rename(tmp, out)
        time.sleep(interval)


if __name__ == "__main__":
    main()
