"""kraft-jepsen: the kafka workload and its checks on real kraft-server processes, each in
its own network namespace, under a seeded nemesis (docs/jepsen.md)."""
