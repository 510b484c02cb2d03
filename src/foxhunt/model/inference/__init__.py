"""The inference-side forward passes of a trained TFT, beside the training one (model/tft.py) they must equal.

- folded.py: `InferenceTFT`, the weights folded into fewer, larger ops (and `live`: dense windows without an index).
- traced.py: that model as a frozen TorchScript trace per input shape, and the live forwards `Forecaster.update`
  runs (the trace, or onnxruntime when it is installed).

The streaming features those forwards read are computed in data/features/bar_features_live.py;
tests/api/test_parity_matrix.py holds every form to the training model on one trained run.
"""
