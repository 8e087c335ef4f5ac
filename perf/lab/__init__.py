"""Lab tools: one-off measurements that decide whether a kernel change is worth writing."""
