"""ONNX Runtime: sessions, the shape lint (inspect), and the environment report."""
