"""asv benchmark suite for tapegrad (see ``bench_core`` and ``workloads``)."""
