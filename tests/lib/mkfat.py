#!/usr/bin/env python3
"""mkfat.py DEVICE|IMAGE: make an empty FAT32 filesystem (4 KiB clusters).

For the vfat medium of the benchmarks when dosfstools (mkfs.vfat) is not
installed. Writes only the boot sectors, FSInfo and the two FATs; the data
area is left as it is (the image is fresh and sparse).
"""
import os
import struct
import sys
import time

SECTOR = 512
SEC_PER_CLUS = 8
RESERVED = 32
NFATS = 2
MIN_CLUSTERS = 65525  # below this it would be FAT16 by definition


def layout(total_sectors):
    """FAT size in sectors such that the FATs cover every data cluster."""
    fat = 1
    while True:
        data = total_sectors - RESERVED - NFATS * fat
        clusters = data // SEC_PER_CLUS
        need = (clusters + 2) * 4
        need_sectors = (need + SECTOR - 1) // SECTOR
        if need_sectors <= fat:
            return fat, clusters
        fat = need_sectors


def boot_sector(total, fat_sectors):
    b = bytearray(SECTOR)
    b[0:3] = b"\xeb\x58\x90"
    b[3:11] = b"MSWIN4.1"
    struct.pack_into("<HBHBHHBHHHII", b, 11, SECTOR, SEC_PER_CLUS, RESERVED, NFATS,
                     0, 0, 0xF8, 0, 32, 64, 0, total)
    struct.pack_into("<IHHIHH", b, 36, fat_sectors, 0, 0, 2, 1, 6)
    struct.pack_into("<BBBI", b, 64, 0x80, 0, 0x29, int(time.time()) & 0xFFFFFFFF)
    b[71:82] = b"SMBENCH    "
    b[82:90] = b"FAT32   "
    b[510:512] = b"\x55\xaa"
    return bytes(b)


def fsinfo(free_clusters):
    b = bytearray(SECTOR)
    struct.pack_into("<I", b, 0, 0x41615252)
    struct.pack_into("<III", b, 484, 0x61417272, free_clusters, 3)
    struct.pack_into("<I", b, 508, 0xAA550000)
    return bytes(b)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: mkfat.py DEVICE|IMAGE")
    fd = os.open(sys.argv[1], os.O_RDWR)
    size = os.lseek(fd, 0, os.SEEK_END)
    total = size // SECTOR
    fat_sectors, clusters = layout(total)
    if clusters < MIN_CLUSTERS:
        sys.exit("mkfat.py: %d MiB is too small for FAT32 with 4 KiB clusters"
                 % (size >> 20))
    boot, info = boot_sector(total, fat_sectors), fsinfo(clusters - 1)
    for base in (0, 6):
        os.pwrite(fd, boot, base * SECTOR)
        os.pwrite(fd, info, (base + 1) * SECTOR)
    zero = bytes(SECTOR * 64)
    head = struct.pack("<III", 0x0FFFFFF8, 0x0FFFFFFF, 0x0FFFFFFF)  # 2 = root
    for n in range(NFATS):
        start = (RESERVED + n * fat_sectors) * SECTOR
        for off in range(0, fat_sectors * SECTOR, len(zero)):
            os.pwrite(fd, zero[:min(len(zero), fat_sectors * SECTOR - off)], start + off)
        os.pwrite(fd, head, start)
    root = (RESERVED + NFATS * fat_sectors) * SECTOR
    os.pwrite(fd, bytes(SEC_PER_CLUS * SECTOR), root)
    os.fsync(fd)
    os.close(fd)


if __name__ == "__main__":
    main()
