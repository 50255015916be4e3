"""Scale-out: independent pieces of work (variant evaluations, shards of the statistics pass) run in this process
or over a Ray cluster (the [ray] extra), their results taken back in the order given."""
