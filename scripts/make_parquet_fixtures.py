#!/usr/bin/env python3
"""Writes Parquet fixtures with pyarrow for the C++ reader (src/data/parquet.h) to be checked
against files it did not write itself: one small file per setting the reader supports, into
tests/fixtures/parquet/, and expected.json holding each file's settings and values.
The test Parquet.PyarrowFixtures (tests/data/parquet_test.cpp) reads them all back and
compares; it skips itself while the folder has no expected.json.

    pip install pyarrow && python3 scripts/make_parquet_fixtures.py [OUT_DIR]

Settings: dictionary on/off, dictionary -> PLAIN fallback inside one column chunk (a tiny
dictionary_pagesize_limit), data page v1/v2, DELTA_LENGTH_BYTE_ARRAY, codecs
none/snappy/zstd/gzip, nulls (OPTIONAL columns), several row groups and pages, UTF-8,
empty and > 1 MiB strings.
"""
import hashlib
import json
import os
import sys

import pyarrow as pa
import pyarrow.parquet as pq


def rows(n, seed, nulls):
    words = ["你好，世界", "", "prompt", "a longer response with spaces", "ß∂ƒ©˙∆", "x"]
    out = []
    state = seed
    for i in range(n):
        state = (state * 1103515245 + 12345) % (1 << 31)
        k = state % 10
        if nulls and (k == 0 or 40 <= i < 60):
            out.append(None)
        elif k < 7:
            out.append(words[k % 6])
        else:
            out.append(f"row {i} 文本 {state}")  # many distinct values: dictionaries grow
    return out


def table(n, nulls, seed=1):
    prompt = rows(n, seed, nulls)
    response = rows(n, seed + 1, nulls)
    if not nulls:
        # REQUIRED columns: pyarrow writes a non-nullable field as REQUIRED.
        schema = pa.schema([pa.field("prompt", pa.string(), nullable=False),
                            pa.field("response", pa.string(), nullable=False)])
    else:
        schema = pa.schema([pa.field("prompt", pa.string()), pa.field("response", pa.string())])
    return pa.table({"prompt": prompt, "response": response}, schema=schema)


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "parquet")
    os.makedirs(out_dir, exist_ok=True)
    cases = []  # (file name, table, write_table keyword arguments, checks on the metadata)

    for codec in ["none", "snappy", "zstd", "gzip"]:
        for version in ["1.0", "2.0"]:
            for nulls in [False, True]:
                for dictionary in [True, False]:
                    name = f"{'dict' if dictionary else 'plain'}_v{version[0]}_{codec}_{'nulls' if nulls else 'required'}.parquet"
                    cases.append((name, table(700, nulls), dict(
                        compression=codec, data_page_version=version, use_dictionary=dictionary,
                        row_group_size=300, data_page_size=1024), None))
        # DELTA_LENGTH_BYTE_ARRAY needs the dictionary off for those columns.
        for version in ["1.0", "2.0"]:
            cases.append((f"delta_length_v{version[0]}_{codec}_nulls.parquet", table(700, True), dict(
                compression=codec, data_page_version=version, use_dictionary=False,
                column_encoding={"prompt": "DELTA_LENGTH_BYTE_ARRAY", "response": "DELTA_LENGTH_BYTE_ARRAY"},
                row_group_size=300, data_page_size=1024), "DELTA_LENGTH_BYTE_ARRAY"))

    # Dictionary pages, then PLAIN pages in the same chunk: the dictionary outgrows its limit
    # after the first batch of rows (pyarrow does this at 1 MiB by default).
    for version in ["1.0", "2.0"]:
        for codec in ["none", "snappy"]:
            cases.append((f"dict_fallback_v{version[0]}_{codec}.parquet", table(5000, True, seed=7), dict(
                compression=codec, data_page_version=version, use_dictionary=True,
                dictionary_pagesize_limit=256, write_batch_size=128, data_page_size=2048), "FALLBACK"))

    # A string over 1 MiB (a page of its own), with empty strings and UTF-8 around it; one
    # only, so that the uncompressed fixture stays near 1 MiB.
    big = "".join(chr(ord("a") + i % 26) for i in range(1100 * 1024)) + "尾"
    long_table = pa.table({"prompt": [big, "短", "", "x"], "response": ["", None, "y", "回答"]})
    for codec in ["none", "snappy", "zstd", "gzip"]:
        cases.append((f"long_strings_{codec}.parquet", long_table,
                      dict(compression=codec, use_dictionary=False), None))

    expected = {}
    for name, tbl, kwargs, check in cases:
        path = os.path.join(out_dir, name)
        pq.write_table(tbl, path, **kwargs)
        meta = pq.ParquetFile(path).metadata
        encodings = set()
        for g in range(meta.num_row_groups):
            for c in range(meta.num_columns):
                encodings.update(meta.row_group(g).column(c).encodings)
        if check == "FALLBACK":
            # Necessary, not sufficient (a dictionary chunk lists PLAIN for its dictionary
            # page too); with 256 bytes of dictionary and thousands of distinct values the
            # writer must fall back.
            col = meta.row_group(0).column(0)
            assert "PLAIN" in col.encodings and any(e in col.encodings for e in ("RLE_DICTIONARY", "PLAIN_DICTIONARY")), \
                f"{name}: no dictionary-to-PLAIN fallback happened ({col.encodings})"
        elif check is not None:
            assert check in encodings, f"{name}: {check} not used ({encodings})"
        settings = {k: v for k, v in kwargs.items() if k != "column_encoding"}
        if "column_encoding" in kwargs:
            settings["column_encoding"] = "DELTA_LENGTH_BYTE_ARRAY"
        expected[name] = {
            "settings": settings,
            "encodings": sorted(encodings),
            "num_rows": tbl.num_rows,
            "num_row_groups": meta.num_row_groups,
            "columns": {c: tbl.column(c).to_pylist() for c in tbl.column_names},
        }
        print(f"{name}: {os.path.getsize(path)} bytes, {meta.num_row_groups} row groups, {sorted(encodings)}")

    # Each distinct column's values are stored once ("values", by a hash of their JSON) and the
    # files refer to them: most fixtures hold the same few tables, and the long string would
    # otherwise be repeated per codec.
    values, files = {}, {}
    for name, e in expected.items():
        cols = {}
        for c, vals in e["columns"].items():
            key = hashlib.sha1(json.dumps(vals, ensure_ascii=False).encode()).hexdigest()[:12]
            values[key] = vals
            cols[c] = {"ref": key}
        files[name] = {**e, "columns": cols}
    with open(os.path.join(out_dir, "expected.json"), "w", encoding="utf-8") as f:
        json.dump({"files": files, "values": values}, f, ensure_ascii=False, indent=1)
    print(f"{len(cases)} fixtures and expected.json written to {out_dir}")


if __name__ == "__main__":
    main()
