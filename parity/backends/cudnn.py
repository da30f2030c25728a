"""cuDNN's refusal phrases, shared by the two backends that reach cuDNN's attention graph:
SDPA's ``CUDNN_ATTENTION`` kernel (:mod:`.sdpa`) and JAX's ``implementation="cudnn"``
(:mod:`.jax_attn`). No backend lives here.

Who says what, and when (the cuDNN frontend validates the SDPA graph before building it and
returns ``GRAPH_NOT_SUPPORTED`` with a sentence; PyTorch raises it as ``RuntimeError: cuDNN
Frontend error: ...``, JAX/XLA as its runtime error at compile time):

=======================================  ====================================================
phrase                                   example (the library's words)
=======================================  ====================================================
``is only supported``                    "Sliding window attention is only supported with
                                         max_s_q <= max_s_kv." (a window with Sq > Sk; seen on
                                         the H200 through jax-cudnn-causal-cuda)
``does not support``                     "Bottom right causal mask does not support max_s_q >
                                         max_s_kv. Please virtually slice the Q tensor ..."
``is not supported``                     "... this specific combination of s_q, s_kv, and
                                         left_bound ... is not supported for backend version
                                         9.9 or below"
``hidden_dim should be``                 "Num hidden_dim should be less than or equal to 128
                                         and hidden_dim should be multiple of 8"
``No execution plans support the graph``  no engine of this cuDNN build runs the graph
``No valid engine configs``              the same, as PyTorch words it ("cuDNN Frontend
                                         error: No valid engine configs for ...")
``GRAPH_NOT_SUPPORTED``                  the frontend's error code, where only it is printed
``CUDNN_STATUS_NOT_SUPPORTED``           the backend library's status code
=======================================  ====================================================
"""

from __future__ import annotations

CUDNN_REFUSALS: tuple[str, ...] = (
    "is only supported",
    "does not support",
    "is not supported",
    "hidden_dim should be",
    "No execution plans support the graph",
    "No valid engine configs",
    "GRAPH_NOT_SUPPORTED",
    "CUDNN_STATUS_NOT_SUPPORTED",
)
