"""The merged figures of what `hutch pipeline` wrote: a window's `final` row and its `correction`
rows (spark/windows.py) as one, per (gateway, sensor, window). What `hutch plot` draws, and what
docs/pipeline.md's Spark and pandas snippets compute the same way:

    count  the rows' counts summed          sum   their sums summed
    min    the least of their mins          max   the greatest of their maxes
    mean   sum / count                      last  the `last` of the row whose `last_ts` is latest

No pyspark: plain rows (dicts, as pyarrow's to_pylist gives them).
"""


def merged(rows):
    """One dict per (gateway, sensor, window_start) of rows, in (window_start, gateway, sensor)
    order: gateway, sensor, window_start, window_end, count, sum, min, max, mean, last, last_ts,
    and rows (how many rows it merged)."""
    out = {}
    for row in rows:
        key = (row.get("gateway") or "", row["sensor"], row["window_start"])
        total = row["sum"] if row.get("sum") is not None else row["mean"] * row["count"]
        have = out.get(key)
        if have is None:
            out[key] = {
                "gateway": key[0],
                "sensor": row["sensor"],
                "window_start": row["window_start"],
                "window_end": row["window_end"],
                "count": row["count"],
                "sum": total,
                "min": row["min"],
                "max": row["max"],
                "last": row["last"],
                "last_ts": row.get("last_ts"),
                "rows": 1,
            }
            continue
        have["count"] += row["count"]
        have["sum"] += total
        have["min"] = min(have["min"], row["min"])
        have["max"] = max(have["max"], row["max"])
        have["rows"] += 1
        if row.get("last_ts") is not None and (have["last_ts"] is None or row["last_ts"] > have["last_ts"]):
            have["last"], have["last_ts"] = row["last"], row["last_ts"]
    for figures in out.values():
        figures["mean"] = figures["sum"] / figures["count"]
    return [out[key] for key in sorted(out, key=lambda key: (key[2], key[0], str(key[1])))]
