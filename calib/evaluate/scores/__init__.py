"""Per-sample scores against FP32 beyond the built-in tasks: strings (exact match, character error rate), vectors
(cosine) and the user's own comparison function, with the built-in CTC text head; each figure named in report.json
as the others are, with its interval."""
