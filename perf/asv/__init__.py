"""asv's benchmark_dir (asv.conf.json): the nightly history's benchmarks; see benchmarks.py."""
