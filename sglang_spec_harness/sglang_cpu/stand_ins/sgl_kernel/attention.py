"""The `intel_amx` attention backend's sgl-kernel ops, in torch (SGLang 0.5.23's CPU engine).

`IntelAMXAttnBackend` (srt/layers/attention/intel_amx_backend.py) calls
`torch.ops.sgl_kernel.decode_attention_cpu` / `extend_attention_cpu` and, for the EAGLE draft,
`build_draft_decode_metadata_cpu`; the signatures follow those call sites. Causal attention over
the request's KV cache, without tree masks (topk 1 drafts are chains). Each op runs inside a
`record_function` span named `sgl_kernel::<op>[stand-in]`, so a trace says where it ran.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.profiler import record_function


def _attend(q, k, v, sm_scale, logit_cap, mask=None):
    # q [Lq,H,D], k/v [Lk,Hk,D] -> [Lq,H,Dv]. Fused SDPA (the CPU flash kernel), like the real op (one
    # fused C++ kernel): so the profiler shows no aten::softmax from attention, only the draft's.
    H, Hk = q.shape[1], k.shape[1]
    if logit_cap and logit_cap > 0:  # not used by Llama; explicit path
        if Hk != H:
            k = k.repeat_interleave(H // Hk, dim=1)
            v = v.repeat_interleave(H // Hk, dim=1)
        s = torch.einsum("qhd,khd->hqk", q.float(), k.float()) * sm_scale
        s = logit_cap * torch.tanh(s / logit_cap)
        if mask is not None:
            s = s.masked_fill(~mask.unsqueeze(0), float("-inf"))
        return torch.einsum("hqk,khd->qhd", torch.softmax(s, dim=-1), v.float())
    out = F.scaled_dot_product_attention(
        q.float().transpose(0, 1).unsqueeze(0), k.float().transpose(0, 1).unsqueeze(0),
        v.float().transpose(0, 1).unsqueeze(0), attn_mask=mask, scale=sm_scale, enable_gqa=Hk != H)
    return out[0].transpose(0, 1)


# What a call from an older SGLang release that does not pass a parameter means (sglang_spec_harness.sglang_cpu.port
# adapts those calls): unscaled KV, self-attention, no window, no sinks, no tree mask, causal.
OMITTED_DEFAULTS = {"key_scale": 1.0, "value_scale": 1.0, "is_cross_attention": False, "sliding_window_size": 0,
                    "encoder_lens": None, "sinks": None, "tree_mask": None, "is_causal": True}


def _check_lengths(op, seq_lens, pool_len, extend_seq_lens=None, extend_start_loc=None, rows=None):
    # The real kernels index req_to_token with these without checks; a wrong length here is a caller's
    # bug, said in plain words rather than as a shape error deep in SDPA.
    lens = seq_lens.tolist()
    for i, length in enumerate(lens):
        if length < 0 or length > pool_len:
            raise ValueError(f"sgl_kernel stand-in: {op}: seq_lens[{i}] = {length} is outside 0..{pool_len} "
                             "(the req_to_token row width)")
    if extend_seq_lens is None:
        return
    for i, (length, extend, start) in enumerate(zip(lens, extend_seq_lens.tolist(), extend_start_loc.tolist())):
        if extend > length:
            raise ValueError(f"sgl_kernel stand-in: {op}: seq_lens[{i}] = {length} is shorter than extend_seq_lens[{i}] "
                             f"= {extend}: seq_lens must include the extend tokens (prefix = seq_lens - extend_seq_lens)")
        if start + extend > rows:
            raise ValueError(f"sgl_kernel stand-in: {op}: request {i}'s extend rows {start}..{start + extend} run past "
                             f"the {rows} query rows")


def decode_attention_cpu(q, k_buffer, v_buffer, key_scale, value_scale, o, k, v, cache_loc,
                         attn_logits, req_to_token, req_pool_indices, seq_lens, sm_scale,
                         logit_cap, is_cross_attention, sliding_window_size, encoder_lens, sinks):
    if sinks is not None or is_cross_attention:
        raise NotImplementedError("sgl_kernel stand-in: attention sinks and cross-attention are not implemented")
    _check_lengths("decode_attention_cpu", seq_lens, req_to_token.shape[1])
    if k is not None and v is not None:  # kernel writes the new token's KV itself
        k_buffer[cache_loc] = k.view(-1, *k_buffer.shape[1:]).to(k_buffer.dtype)
        v_buffer[cache_loc] = v.view(-1, *v_buffer.shape[1:]).to(v_buffer.dtype)
    for b, (r, L) in enumerate(zip(req_pool_indices.tolist(), seq_lens.tolist())):
        idx = req_to_token[r, :L].long()
        if sliding_window_size and sliding_window_size > 0:
            idx = idx[-sliding_window_size:]
        kk = k_buffer[idx].float() * key_scale
        vv = v_buffer[idx].float() * value_scale
        o[b] = _attend(q[b:b + 1], kk, vv, sm_scale, logit_cap)[0].to(o.dtype)


def extend_attention_cpu(q, k, v, o, k_buffer, v_buffer, key_scale, value_scale, req_to_token,
                         req_pool_indices, seq_lens, extend_seq_lens, extend_start_loc,
                         max_extend_len, sm_scale, logit_cap, is_cross_attention,
                         sliding_window_size, encoder_lens, sinks, tree_mask, is_causal):
    if sinks is not None or is_cross_attention:
        raise NotImplementedError("sgl_kernel stand-in: attention sinks and cross-attention are not implemented")
    if tree_mask is not None:
        raise NotImplementedError("sgl_kernel stand-in: tree masks (topk > 1) are not implemented")
    _check_lengths("extend_attention_cpu", seq_lens, req_to_token.shape[1], extend_seq_lens, extend_start_loc, q.shape[0])
    for r, L, E, S in zip(req_pool_indices.tolist(), seq_lens.tolist(), extend_seq_lens.tolist(),
                          extend_start_loc.tolist()):
        P = L - E
        pidx = req_to_token[r, :P].long()
        kp = k_buffer[pidx].float() * key_scale
        vp = v_buffer[pidx].float() * value_scale
        if k is not None:
            ke, ve = k[S:S + E].float(), v[S:S + E].float()
        else:
            eidx = req_to_token[r, P:L].long()
            ke, ve = k_buffer[eidx].float() * key_scale, v_buffer[eidx].float() * value_scale
        kk, vv = torch.cat([kp, ke]), torch.cat([vp, ve])
        mask = None
        if is_causal:
            qpos = torch.arange(P, L).unsqueeze(1)
            kpos = torch.arange(L).unsqueeze(0)
            mask = kpos <= qpos
            if sliding_window_size and sliding_window_size > 0:
                mask &= kpos > qpos - sliding_window_size
        o[S:S + E] = _attend(q[S:S + E], kk, vv, sm_scale, logit_cap, mask).to(o.dtype)


def build_draft_decode_metadata_cpu(req_to_token, req_pool_indices, seq_lens, topk, num_steps,
                                    pool_len):
    # Row (i, t) = req i's committed prefix + the num_steps slots of topk branch t
    # (same slot layout as generate_draft_decode_kv_indices with page_size 1).
    bs = req_pool_indices.numel()
    out = torch.zeros((bs * topk, pool_len), dtype=req_to_token.dtype)
    for i, (r, L) in enumerate(zip(req_pool_indices.tolist(), seq_lens.tolist())):
        for t in range(topk):
            row = out[i * topk + t]
            row[:L] = req_to_token[r, :L]
            row[L:L + num_steps] = req_to_token[r, L + t * num_steps: L + (t + 1) * num_steps]
    return out


def _named(fn, name):
    def wrapper(*a, **k):
        with record_function(name):
            return fn(*a, **k)
    wrapper.__name__ = fn.__name__
    return wrapper


def register_attention_ops():
    """`torch.ops.sgl_kernel.decode_attention_cpu` / `extend_attention_cpu`, where the backend looks them up."""
    ns = torch.ops.sgl_kernel
    ns.decode_attention_cpu = _named(decode_attention_cpu, "sgl_kernel::decode_attention_cpu[stand-in]")
    ns.extend_attention_cpu = _named(extend_attention_cpu, "sgl_kernel::extend_attention_cpu[stand-in]")
