"""`tools/device_check.py`: one prepared run on a GPU machine that answers what only a GPU can (stage parity
against the CPU, engine rates against the cost model's roofline, the KV tier's link, the policies' claim), each
section within its share of a time budget; `--dry-run` does every step at tiny size on the CPU."""
