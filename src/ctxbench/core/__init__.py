"""The part contract (``part``: typed constructors, their checks, building a part from a config node), the errors
every layer raises (``errors``), the JSONL files every layer reads and appends to (``jsonl``), a sampled cache's side
files (``cache_record``) and a job's shard (``shards``). It imports only ``ctxbench.utils``."""
