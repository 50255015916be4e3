"""Streaming statistics of the statistics pass: mergeable histograms and TensorRT's grids (histogram), the compiled
loops behind them (kernels), numba's OpenMP settings (openmp) and the thread that loads the loops early (warmup)."""
