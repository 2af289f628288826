"""The sgl-kernel CPU ops of SGLang 0.5.23's EAGLE path, in torch and Python.

Each mirrors, element for element, the Triton kernel that SGLang runs for the same call on a GPU
(named in its comment); tests/test_sglang_cpu_stand_ins.py holds each against that kernel from the
wheel, run by Triton's interpreter. Python loops over the batch: for tiny models only.
"""

from __future__ import annotations

import ctypes

import torch


def copy_all_layer_kv_cache_cpu(data_ptrs, strides, tgt_loc, src_loc):
    # mirrors cache_move.copy_all_layer_kv_cache_tiled: per buffer, row tgt <- row src (bytes), all read first
    ptrs, strd = data_ptrs.tolist(), strides.tolist()
    tgt, src = tgt_loc.tolist(), src_loc.tolist()
    for base, stride in zip(ptrs, strd):
        rows = [ctypes.string_at(base + s * stride, stride) for s in src]  # read all first
        for t, buf in zip(tgt, rows):
            ctypes.memmove(base + t * stride, buf, stride)


def assign_req_to_token_pool_cpu(req_pool_indices, req_to_token, start_offset, end_offset,
                                 out_cache_loc, pool_len):
    # mirrors allocation.assign_req_to_token_pool: req_to_token[r, start:end] <- the next end - start slots
    off = 0
    for r, s, e in zip(req_pool_indices.tolist(), start_offset.tolist(), end_offset.tolist()):
        n = e - s
        if n > 0:
            req_to_token[r, s:e] = out_cache_loc[off:off + n].to(req_to_token.dtype)
        off += n


def fill_bonus_tokens_cpu(accept_tokens, accept_lens, bonus_tokens, accept_stride):
    # mirrors eagle.fill_bonus_tokens: each request's last accepted token, accept_tokens[b, accept_lens[b] - 1]
    flat = accept_tokens.reshape(-1)
    idx = torch.arange(accept_lens.numel(), device=flat.device) * accept_stride + accept_lens.long() - 1
    bonus_tokens.copy_(flat[idx].to(bonus_tokens.dtype))


def fill_accept_out_cache_loc_cpu(accept_index, out_cache_loc, accept_out_cache_loc):
    # mirrors eagle.fill_accept_out_cache_loc: out_cache_loc[accept_index], -1 skipped, packed in order
    ai = accept_index.reshape(-1)
    sel = ai[ai != -1].long()
    accept_out_cache_loc[: sel.numel()] = out_cache_loc[sel].to(accept_out_cache_loc.dtype)


def assign_draft_cache_locs_contiguous_cpu(req_pool_indices, req_to_token, seq_lens,
                                           out_cache_loc, pool_len, topk, num_cols):
    # mirrors cache_locs.assign_draft_cache_locs_contiguous (no positions: SGLang's CPU branch asks for none)
    n = topk * num_cols
    for i, (r, s) in enumerate(zip(req_pool_indices.tolist(), seq_lens.tolist())):
        out_cache_loc[i * n:(i + 1) * n] = req_to_token[r, s:s + n].to(out_cache_loc.dtype)


def assign_extend_cache_locs_cpu(req_pool_indices, req_to_token, start_offset, end_offset,
                                 out_cache_loc, pool_len):
    # mirrors cache_locs.assign_extend_cache_locs: the slots req_to_token[r, start:end], packed in order
    off = 0
    for r, s, e in zip(req_pool_indices.tolist(), start_offset.tolist(), end_offset.tolist()):
        n = e - s
        if n > 0:
            out_cache_loc[off:off + n] = req_to_token[r, s:e].to(out_cache_loc.dtype)
        off += n


def gather_rows_cpu(idx, s0, d0, n0, s1, d1, n1, s2, d2, n2, s3, d3, n3, has3):
    # mirrors gather_spec_extras._gather_rows_kernel: for each buffer k, output row r (n_k elements)
    # <- source row idx[r]; the fourth buffer only when has3 (else s3/d3 are placeholders)
    rows = idx.long()
    buffers = [(s0, d0, n0), (s1, d1, n1), (s2, d2, n2)] + ([(s3, d3, n3)] if has3 else [])
    for src, dst, width in buffers:
        width = int(width)
        gathered = src.reshape(-1).view(-1, width)[rows]
        dst.view(-1)[: gathered.numel()] = gathered.reshape(-1)


def build_tree_kernel_efficient_cpu(parent_list, selected_index, verified_seq_len, tree_mask,
                                    positions, retrieve_index, retrieve_next_token,
                                    retrieve_next_sibling, topk, depth, draft_token_num,
                                    tree_mask_mode):
    # mirrors spec_tree.sgl_build_tree_kernel_efficient_triton (modes 0 FULL_MASK, 1 QLEN_ONLY)
    mode = int(tree_mask_mode)
    if mode not in (0, 1):
        raise NotImplementedError(f"sgl_kernel stand-in: tree_mask_mode {mode} (only 0 FULL_MASK and 1 QLEN_ONLY)")
    D = draft_token_num
    seq = verified_seq_len.tolist()
    bs = len(seq)
    pl = parent_list.reshape(bs, -1).tolist()
    si = selected_index.reshape(bs, -1).tolist()
    pos, ri = positions.view(-1), retrieve_index.view(-1)
    rnt, rns = retrieve_next_token.view(-1), retrieve_next_sibling.view(-1)
    tm = tree_mask.view(-1)
    prefix = 0
    for b in range(bs):
        seq_len = seq[b]
        seq_tree_idx = D * D * b + prefix * D
        pos[b * D] = seq_len
        nt = rnt[b * D:(b + 1) * D].tolist()
        ns = rns[b * D:(b + 1) * D].tolist()
        for i in range(D - 1, 0, -1):
            ri[b * D + i] = b * D + i
            ptb = si[b][i - 1] // topk
            ppos, found = 0, ptb == 0
            if not found:
                ptok = pl[b][ptb]
                for pp in range(D - 1):
                    if si[b][pp] == ptok:
                        ppos, found = pp + 1, True
                        break
            if found:
                if nt[ppos] != -1:
                    ns[i] = nt[ppos]
                nt[ppos] = i
        rnt[b * D:(b + 1) * D] = torch.tensor(nt, dtype=rnt.dtype)
        rns[b * D:(b + 1) * D] = torch.tensor(ns, dtype=rns.dtype)
        ri[b * D] = b * D
        for x in range(D):
            if mode == 0:
                tti = seq_tree_idx + (seq_len + D) * x + seq_len + 1
            else:
                tti = D * D * b + D * x + 1
            tm[tti - 1] = True
            tm[tti:tti + D - 1] = False
            if x > 0:
                cur, position = x - 1, 0
                for _ in range(depth):
                    position += 1
                    tm[tti + cur] = True
                    ptb = si[b][cur] // topk
                    if ptb == 0:
                        break
                    ptok = pl[b][ptb]
                    nxt = [cp for cp in range(D - 1) if si[b][cp] == ptok]
                    if not nxt:
                        break
                    cur = nxt[0]
                pos[b * D + x] = position + seq_len
        prefix += seq_len


def verify_tree_greedy_cpu(predicts, accept_index, accept_token_num, candidates, retrive_index,
                           retrive_next_token, retrive_next_sibling, target_predict):
    # mirrors spec_tree.verify_tree_greedy_kernel_triton
    bs = candidates.shape[0]
    S = accept_index.shape[1]
    ri, rnt, rns = retrive_index.tolist(), retrive_next_token.tolist(), retrive_next_sibling.tolist()
    cand, tp = candidates.tolist(), target_predict.reshape(-1).tolist()
    pred, ai = predicts.view(-1), accept_index.view(-1)
    for b in range(bs):
        last = ri[b][0]
        ai[b * S] = last
        n_acc, cur = 0, 0
        for _ in range(1, S):
            cur = rnt[b][cur]
            target = tp[last]
            matched = False
            while cur != -1:
                if cand[b][cur] == target:
                    pred[last] = target
                    n_acc += 1
                    ai[b * S + n_acc] = ri[b][cur]
                    last = ri[b][cur]
                    matched = True
                    break
                cur = rns[b][cur]
            if not matched:
                break
        accept_token_num[b] = n_acc
        pred[last] = tp[last]
