"""silero-vad's output as calib's class scores: [1 - p, p] per chunk, so that top-1 agreement with FP32 is the
package's own speech decision (probability >= 0.5, get_speech_timestamps' threshold) agreeing with FP32's."""
import numpy as np


def decide(outputs):
    p = np.asarray(outputs["output"], np.float64).reshape(-1)
    return np.stack([1 - p, p], 1)
