"""Capture stage: mark regions while capturing a CUDA graph; key, rekey and calibrate nodes.

Only ``api``, ``backends`` and ``collectives`` import torch, and only when used. The
annotation model (``annotations``) and the sidecar (``sidecar``) are torch-free.
"""
