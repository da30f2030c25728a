"""A user kernel plugged into attn-parity without editing the package.

Run it from the repository root:

    python -m parity run --backend examples.my_kernel:MyKernel --profile quick
    python -m parity run --backend examples.my_kernel:MyKernelOffByOne --profile quick   # fails, and says why

``MyKernel`` is an honest tiled implementation (online softmax over key blocks of 16,
float32 accumulation): it rounds differently from the reference and must pass.
``MyKernelOffByOne`` is the same kernel with the classic bug: the window's left edge
is one token too far left (``W`` keys plus the current one instead of ``W``).
"""

from __future__ import annotations

import torch

from parity import Backend, Case, Inputs


class MyKernel(Backend):
    name = "my-kernel"
    device = "cpu"
    description = "example: tiled online-softmax attention in float32"
    block = 16
    extra_left = 0  # the planted bug below sets this to 1

    def unsupported_reason(self, case: Case) -> str | None:
        if case.head_dim > 256:
            return "head_dim > 256"
        return None

    def run(self, case: Case, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        w = case.window
        for _, q, k, v, qs in inputs.sequences():
            sq, sk = q.shape[0], k.shape[0]
            d = sk - sq if w.align == "bottom_right" else 0
            i = torch.arange(sq)[:, None]  # (Sq, 1)
            qf = q.float().transpose(0, 1) * case.softmax_scale  # (hq, Sq, D)
            kf = k.float().repeat_interleave(case.group, 1).transpose(0, 1)  # (hq, Sk, D)
            vf = v.float().repeat_interleave(case.group, 1).transpose(0, 1)  # (hq, Sk, D)
            m = torch.full((case.hq, sq, 1), float("-inf"))  # running max
            l = torch.zeros(case.hq, sq, 1)  # running sum  # noqa: E741
            acc = torch.zeros(case.hq, sq, case.head_dim)
            for j0 in range(0, sk, self.block):
                j = torch.arange(j0, min(sk, j0 + self.block))[None, :]  # (1, blk)
                ok = torch.ones(sq, j.shape[1], dtype=torch.bool)
                if w.left is not None:
                    ok &= j >= i + d - w.left - self.extra_left
                if w.right is not None:
                    ok &= j <= i + d + w.right
                s = qf @ kf[:, j0 : j0 + self.block].transpose(1, 2)  # (hq, Sq, blk)
                if case.softcap is not None:
                    s = case.softcap * torch.tanh(s / case.softcap)
                s = s.masked_fill(~ok, float("-inf"))
                m_new = torch.maximum(m, s.amax(-1, keepdim=True))
                safe = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
                p = torch.exp(s - safe)  # (hq, Sq, blk)
                corr = torch.exp(torch.where(torch.isfinite(m), m - safe, torch.full_like(m, float("-inf"))))
                l = l * corr + p.sum(-1, keepdim=True)  # noqa: E741
                acc = acc * corr + p @ vf[:, j0 : j0 + self.block]
                m = m_new
            o = torch.where(l > 0, acc / l.clamp(min=1e-30), torch.zeros_like(acc))  # (hq, Sq, D)
            out[qs] = o.transpose(0, 1).to(out.dtype)
        return out


class MyKernelOffByOne(MyKernel):
    name = "my-kernel-off-by-one"
    description = "example with a planted bug: window one token wider on the left"
    extra_left = 1
