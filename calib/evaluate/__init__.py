"""FP32 against INT8 (the CPU simulation of the deployed configuration): per layer, per output, on the task metric;
the decision between candidates with its intervals, and the report (JSON, Markdown, HTML)."""
