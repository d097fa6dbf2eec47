#!/usr/bin/python3
"""Extract Jane Austen's six novels from Debian's r-cran-janeaustenr package.

The package is only *downloaded* (apt-get download) and unpacked with
dpkg-deb -x into a temporary directory; R is never installed.  The novels live
in R's lazy-load database (data/Rdata.rdb + data/Rdata.rdx).  This file holds a
small pure-Python reader for R's XDR serialization format, sufficient for
those objects (lists, pairlists, character/integer/real/logical vectors,
attributes, symbols, CHARSXP including NA).

Output: one UTF-8 text file per novel (lines joined with '\n') in --out
(default $XDG_CACHE_HOME/mpcache/austen, ~/.cache when unset).  Rerunnable from scratch.

Usage:  /usr/bin/python3 tools/train/extract_austen.py [--out DIR] [--deb FILE]
"""
import argparse
import glob
import gzip
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

NOVELS = ["sensesensibility", "prideprejudice", "mansfieldpark", "emma",
          "northangerabbey", "persuasion"]

# ---------------------------------------------------------------------------
# R serialization (XDR, format version 2 or 3)
# ---------------------------------------------------------------------------
NILSXP, SYMSXP, LISTSXP, CLOSXP, ENVSXP, PROMSXP, LANGSXP = 0, 1, 2, 3, 4, 5, 6
CHARSXP, LGLSXP, INTSXP, REALSXP, CPLXSXP, STRSXP = 9, 10, 13, 14, 15, 16
DOTSXP, VECSXP, EXPRSXP, RAWSXP, S4SXP = 17, 19, 20, 24, 25
REFSXP, NILVALUE_SXP, GLOBALENV_SXP, UNBOUNDVALUE_SXP = 255, 254, 253, 252
MISSINGARG_SXP, BASENAMESPACE_SXP, EMPTYENV_SXP, BASEENV_SXP = 251, 250, 242, 241
ATTRLANGSXP, ATTRLISTSXP = 240, 239
NA_INTEGER = -2147483648


class RObj:
    """Generic R object: .type, .value (python list / str / None), .attrs (dict)."""

    def __init__(self, type_, value, attrs=None):
        self.type, self.value, self.attrs = type_, value, attrs or {}

    def names(self):
        n = self.attrs.get("names")
        return n.value if n is not None else None

    def __repr__(self):
        return "RObj(type=%d, len=%s)" % (self.type, len(self.value) if isinstance(self.value, list) else "-")


class RSymbol(str):
    pass


class XDRReader:
    def __init__(self, data):
        self.d, self.p, self.refs = data, 0, []
        if self.d[:2] != b"X\n":
            raise ValueError("not an XDR R serialization (header %r)" % self.d[:2])
        self.p = 2
        version = self.int()
        self.int()  # writer R version
        self.int()  # minimal reader version
        if version == 3:
            n = self.int()
            self.p += n  # native encoding name
        elif version != 2:
            raise ValueError("unsupported serialization version %d" % version)

    def int(self):
        v = struct.unpack_from(">i", self.d, self.p)[0]
        self.p += 4
        return v

    def length(self):
        n = self.int()
        if n == -1:  # long vector
            hi, lo = self.int(), self.int()
            n = (hi << 32) + lo
        return n

    def pairlist_attrs(self, obj):
        """Convert a pairlist RObj (tagged) into a dict."""
        out = {}
        while obj is not None and isinstance(obj, RObj) and obj.type == LISTSXP:
            tag, car = obj.value[0], obj.value[1]
            out[str(tag)] = car
            obj = obj.value[2]
        return out

    def item(self):
        flags = self.int()
        t = flags & 0xFF
        has_attr = bool(flags & (1 << 9))
        has_tag = bool(flags & (1 << 10))
        if t == NILVALUE_SXP:
            return None
        if t in (EMPTYENV_SXP, BASEENV_SXP, GLOBALENV_SXP, UNBOUNDVALUE_SXP,
                 MISSINGARG_SXP, BASENAMESPACE_SXP):
            return RObj(t, None)
        if t == REFSXP:
            idx = flags >> 8
            if idx == 0:
                idx = self.int()
            return self.refs[idx - 1]
        if t == SYMSXP:
            ch = self.item()  # CHARSXP
            sym = RSymbol(ch if ch is not None else "")
            self.refs.append(sym)
            return sym
        if t in (LISTSXP, LANGSXP, CLOSXP, PROMSXP, DOTSXP, ATTRLANGSXP, ATTRLISTSXP):
            attrs = self.pairlist_attrs(self.item()) if has_attr else {}
            tag = self.item() if has_tag else None
            car = self.item()
            cdr = self.item()
            base = LISTSXP if t in (LISTSXP, ATTRLISTSXP) else t
            return RObj(base, [tag, car, cdr], attrs)
        if t == ENVSXP:
            env = RObj(ENVSXP, None)
            self.refs.append(env)
            self.int()  # locked
            enclos, frame, hashtab, attrib = self.item(), self.item(), self.item(), self.item()
            env.value = [enclos, frame, hashtab]
            env.attrs = self.pairlist_attrs(attrib)
            return env
        if t == CHARSXP:
            n = self.int()
            if n == -1:
                return None  # NA_character_
            s = self.d[self.p:self.p + n]
            self.p += n
            # levels bits: 8 = UTF8, 4 = LATIN1, 64 = ASCII
            lev = flags >> 12
            enc = "latin-1" if (lev & 4) else "utf-8"
            return s.decode(enc, errors="replace")
        if t in (LGLSXP, INTSXP):
            n = self.length()
            v = list(struct.unpack_from(">%di" % n, self.d, self.p))
            self.p += 4 * n
            v = [None if x == NA_INTEGER else x for x in v]
            obj = RObj(t, v)
        elif t == REALSXP:
            n = self.length()
            v = list(struct.unpack_from(">%dd" % n, self.d, self.p))
            self.p += 8 * n
            obj = RObj(t, v)
        elif t == CPLXSXP:
            n = self.length()
            v = struct.unpack_from(">%dd" % (2 * n), self.d, self.p)
            self.p += 16 * n
            obj = RObj(t, [complex(v[2 * i], v[2 * i + 1]) for i in range(n)])
        elif t == RAWSXP:
            n = self.length()
            obj = RObj(t, self.d[self.p:self.p + n])
            self.p += n
        elif t in (STRSXP, VECSXP, EXPRSXP):
            n = self.length()
            obj = RObj(t, [self.item() for _ in range(n)])
        elif t == S4SXP:
            obj = RObj(t, None)
        else:
            raise ValueError("unsupported SEXP type %d at offset %d" % (t, self.p - 4))
        if has_attr:
            obj.attrs = self.pairlist_attrs(self.item())
        return obj


def unserialize(data):
    return XDRReader(data).item()


def lazyload_fetch(rdb, offset, length):
    """One chunk of an .rdb: 4-byte big-endian uncompressed length + zlib data."""
    chunk = rdb[offset:offset + length]
    ulen = struct.unpack(">I", chunk[:4])[0]
    data = zlib.decompress(chunk[4:])
    if len(data) != ulen:
        raise ValueError("bad chunk length %d != %d" % (len(data), ulen))
    return unserialize(data)


def read_lazyload_db(prefix):
    """Return {name: RObj} for all variables of the lazy-load DB at prefix(.rdb/.rdx)."""
    raw = open(prefix + ".rdx", "rb").read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    else:  # R_compress1 style
        raw = zlib.decompress(raw[4:])
    index = unserialize(raw)
    names = index.names()
    variables = index.value[names.index("variables")]
    rdb = open(prefix + ".rdb", "rb").read()
    out = {}
    for name, pos in zip(variables.names(), variables.value):
        off, ln = int(pos.value[0]), int(pos.value[1])
        out[name] = lazyload_fetch(rdb, off, ln)
    return out


# ---------------------------------------------------------------------------
def obtain_package(deb):
    tmp = tempfile.mkdtemp(prefix="janeaustenr-")
    os.chmod(tmp, 0o755)  # let apt's _apt user write the download
    if deb is None:
        subprocess.run(["apt-get", "download", "r-cran-janeaustenr"], cwd=tmp,
                       check=True, stdout=subprocess.DEVNULL)
        deb = glob.glob(os.path.join(tmp, "r-cran-janeaustenr_*.deb"))[0]
    subprocess.run(["dpkg-deb", "-x", deb, os.path.join(tmp, "x")], check=True)
    return tmp


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    ap.add_argument("--out", default=os.path.join(cache, "mpcache", "austen"))
    ap.add_argument("--deb", default=None, help="use this .deb instead of apt-get download")
    ap.add_argument("--keep", action="store_true", help="keep the temporary unpack dir")
    args = ap.parse_args()
    tmp = obtain_package(args.deb)
    try:
        prefixes = glob.glob(os.path.join(tmp, "x", "usr/lib/R/site-library/janeaustenr/data/Rdata.rdx")) + \
            glob.glob(os.path.join(tmp, "x", "usr/lib/R/site-library/janeaustenr/R/sysdata.rdx"))
        objs = {}
        for rdx in prefixes:
            objs.update(read_lazyload_db(rdx[:-4]))
        os.makedirs(args.out, exist_ok=True)
        for name in NOVELS:
            if name not in objs:
                sys.exit("novel %s not found (have %s)" % (name, sorted(objs)))
            o = objs[name]
            if o.type != STRSXP:
                sys.exit("%s: unexpected R type %d" % (name, o.type))
            lines = ["" if s is None else s for s in o.value]
            text = "\n".join(lines).strip("\n") + "\n"
            path = os.path.join(args.out, name + ".txt")
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            print("%-18s %6d lines %8d bytes -> %s" % (name, len(lines), len(text.encode("utf-8")), path))
    finally:
        if args.keep:
            print("unpacked in", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
