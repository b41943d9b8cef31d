#!/usr/bin/env python3
"""Turn marked allocator traces (trace_capture.py --marks) into step programs for vramfit.

A step program is a trace with every request size written over the model's and step's dimensions
and the per-layer parts as repeats, so it can be run for any shape and layer count through the
allocator model (include/vramfit/detail/step_program.hpp), written as a step-program file
(include/vramfit/program_file.hpp) that vramfit reads at run time. Each kind of step (architecture, tied head,
LoRA targets or full fine-tuning, checkpointing, logits kept, optimizer, LoRA dropout) is recorded at two layer counts; the
program taken from the deeper recording must give the shallower recording's events exactly,
request for request, or the kind is rejected.

Usage: python3 trace_program.py TRACES.jsonl[.gz] --programs OUT.programs [--check REAL.jsonl ...]
  The built-in programs: python3 tests/validation/trace_program.py \
      tests/data/traces/hf_peft_probe_traces.jsonl.gz --programs tests/data/programs/hf-peft.programs \
      --check $(ls tests/data/traces/*.jsonl | grep -v /libtorch-)   # the HF traces, not the Probe's
  and for the Probe's LibTorch step (`vramfit probe --stack libtorch --trace-out`):
    python3 tests/validation/trace_program.py tests/data/traces/libtorch_probe_traces.jsonl.gz \
      --stack libtorch --constants 33554432,1048576 --programs tests/data/programs/libtorch.programs \
      --check tests/data/traces/libtorch_real_traces.jsonl.gz
  and for transformers.Trainer's step (gpu_record_trainer.sh: trace_capture.py's Trainer arms):
    python3 tests/validation/trace_program.py tests/data/traces/hf_trainer_traces.jsonl.gz \
      --stack hf_trainer --programs tests/data/programs/hf-trainer.programs \
      --check tests/data/traces/hf_trainer_real_traces.jsonl.gz
"""
import argparse, gzip, itertools, json, os, re, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_harness as H  # no torch at import
DIMS = ['B','S','h','i','H','kvh','d','V','r','S1']
def dims_of(arm):
    s = arm['shape']
    return {'B': arm['batch'], 'S': arm['seq'], 'h': s['hidden'], 'i': s['intermediate'], 'H': s['heads'],
            'kvh': s['kv_heads'], 'd': s['head_dim'], 'V': s['vocab'], 'r': arm.get('lora_rank') or 0,
            'S1': arm['seq'] + 1, 'S128': -(-arm['seq'] // 128) * 128, 'Sm1': arm['seq'] - 1,
            'L': s['layers']}   # L: only the 'tensors' sizes read it (no monomial has it)
COEFS = (1, 2, 4, 8, 16)
CONSTANTS = set()   # request sizes read as constants (--constants)
def monomials(maxdeg=4):
    out = [()]
    for k in range(1, maxdeg + 1):
        out += list(itertools.combinations_with_replacement(DIMS, k))
    return out
MONOS = monomials()
def mono_value(m, D):
    v = 1
    for x in m: v *= D[x]
    return v


# PyTorch's sum over a [tokens, n] tensor to [n] (the grad of a norm weight or of a bias) splits the
# tokens across thread blocks when there are enough of them, and then asks the allocator for a
# staging buffer and a semaphore. Their sizes follow the launch configuration that
# aten/src/ATen/native/cuda/Reduce.cuh (setReduceConfig, ReduceConfig::global_memory_size and
# semaphore_size) picks for a bf16 input summed in fp32, reduced over a non-innermost dimension, on
# a GPU with `sms` multiprocessors of 2048 threads (the H200: 132). include/vramfit/detail/step_program.hpp
# has the same function; tests/step_program_test.cpp checks them against each other's figures.
REDUCE_SMS = 132


def reduce_sizes(outputs, inputs, sms=REDUCE_SMS, threads_per_sm=2048):
    """(staging buffer bytes, semaphore bytes) of summing `inputs` rows of n = `outputs` bf16
    columns in fp32; (0, 0) when the reduction stays within one block per output."""
    if outputs <= 0 or inputs <= 1:
        return 0, 0
    def last_pow2(n):
        p = 1
        while p * 2 <= n: p *= 2
        return p
    def div_up(a, b): return -(-a // b)
    vec = 4                                 # output vectorisation: 4, 2 or 1 columns a thread
    while outputs % vec: vec //= 2
    dim0, dim1 = outputs // vec, inputs
    max_threads = 512 // vec
    d0 = last_pow2(dim0) if dim0 < max_threads else max_threads
    d1 = last_pow2(dim1) if dim1 < max_threads else max_threads
    width = min(d0, 32)
    height = min(d1, max_threads // width)
    width = min(d0, max_threads // height)
    threads = width * height
    step_output, step_input = width, 1
    split_in_block = inputs >= min(height * 16, 256)
    if split_in_block: step_input *= height
    else: step_output *= height
    grid = div_up(outputs // vec, step_output)
    per_thread = div_up(inputs, step_input)
    target = sms * (threads_per_sm // threads)
    if split_in_block and per_thread >= 256 and grid <= target:
        ctas = max(min(div_up(target, grid), div_up(per_thread, 16)), div_up(per_thread, 256))
        if ctas > 1:
            return 4 * outputs * ctas * width * vec, 4 * grid
    return 0, 0


# Flash attention's forward (PyTorch's flash_api.cpp, mha_fwd) splits the keys across thread blocks
# when batch x heads x query blocks would leave the GPU's 2 x 132 block slots mostly idle, and then
# asks for fp32 accumulators: softmax_lse_accum (splits x B x H x S) and out_accum (the same x
# head_dim rounded to 32). num_splits_heuristic, ported; at the recorded arms' dimensions it gives
# one split (no request), so the recordings only show where they go once inserted (FLASH_SPLITS).
def flash_splits(B, H, S, d, sms=REDUCE_SMS):
    def div_up(a, b): return -(-a // b)
    blocks = B * H * div_up(S, 64)
    slots = 2 * sms
    if blocks >= 0.8 * slots:
        return 1
    n_blocks = div_up(S, 256 if d <= 64 else 128 if d <= 128 else 64)
    most = min(128, slots, n_blocks)
    eligible = lambda k: k == 1 or div_up(n_blocks, k) != div_up(n_blocks, k - 1)
    eff = {}
    for k in range(1, most + 1):
        if eligible(k):
            waves = blocks * k / slots
            eff[k] = waves / -(-waves // 1)
    best = max(eff.values())
    for k in range(1, most + 1):
        if k in eff and eff[k] >= 0.85 * best:
            return k
    return 1


def flash_accum_sizes(D):
    k = flash_splits(D['B'], D['H'], D['S'], D['d'])
    if k <= 1:
        return 0, 0
    d_r = -(-D['d'] // 32) * 32
    return 4 * k * D['B'] * D['H'] * D['S'], 4 * k * D['B'] * D['H'] * D['S'] * d_r


FLASH_SPLITS = False   # --stack libtorch: the Probe's step runs flash attention


def value(expr, D):
    """expr: {'terms': [[coef, monomial]...], 'c': const}, or a reduction's staging buffer or
    semaphore {'reduce': 'buf'|'sem', 'out': monomial, 'in': monomial} (0: not requested), or
    per-tensor partial sums {'tensors': [bytes, per layer, fixed], 'chunks': [monomial...]}."""
    if 'tensors' in expr:
        return tensor_chunks_size(expr, D)
    if 'reduce' in expr:
        b, s = reduce_sizes(mono_value(expr['out'], D), mono_value(expr['in'], D))
        return b if expr['reduce'] == 'buf' else s
    if 'flash' in expr:
        lse, out = flash_accum_sizes(D)
        return lse if expr['flash'] == 'lse' else out
    tot = 0
    for c, m in expr['terms']:
        v = c
        for x in m: v *= D[x]
        tot += v
    return tot + expr.get('c', 0)
# The Trainer clips the grads (clip_grad_norm_, max_grad_norm 1.0) before each optimizer step: one
# torch._foreach_norm over every trainable tensor, whose CUDA kernel first asks for a zeroed
# float partial sum per tensor and per 65536-element chunk of the largest tensor
# (foreach_tensor_norm_cuda: output_per_tensor, ntensors * max_chunks_per_tensor opmath elements,
# kChunkSize 65536; aten/src/ATen/native/cuda/ForeachReduceOp.cu). Its size grows with the layer
# count, which no monomial of the dimensions holds. include/vramfit/detail/step_program.hpp
# (SizeKind::tensor_chunks) computes the same.
FOREACH_CHUNK = 65536


def tensor_chunks_size(expr, D):
    """bytes x tensors x the chunks of the largest of `chunks` (1 without any: one element a tensor,
    as the stack of the per-tensor norms that follows)."""
    nbytes, per_layer, fixed = expr['tensors']
    chunks = 1
    if expr['chunks']:
        chunks = -(-max(mono_value(m, D) for m in expr['chunks']) // FOREACH_CHUNK)
    return nbytes * (per_layer * D['L'] + fixed) * chunks


def largest_only(monos):
    """The products that may be the largest at some dimensions: a product whose factors are all
    among another's is never larger (every dimension is at least 1)."""
    from collections import Counter
    def within(a, b):
        return a != b and not (Counter(a) - Counter(b))
    return sorted(m for m in monos if not any(within(m, o) for o in monos))


def trainable_tensors(row, sym):
    """The clip's tensors from a trace row's trainable list: (per layer, fixed, the numels as
    monomials of the dimensions, the grads' bytes per element); None when a numel is no monomial,
    the layers differ or the dtypes do (the clip would norm each dtype apart)."""
    L = row['arm']['shape']['layers']
    per = {}
    fixed, monos = 0, set()
    dtypes = {t[2] for t in row.get('trainable') or []}
    if len(dtypes) != 1 or next(iter(dtypes)) not in GRAD_BYTES:
        return None
    for name, shape, _dtype in row.get('trainable') or []:
        n = 1
        for x in shape: n *= x
        e, _ = sym.find(n)
        if not e or e['terms'][0][0] != 1:
            return None
        monos.add(tuple(e['terms'][0][1]))
        m = re.search(r'\.layers\.(\d+)\.', name)
        if m:
            per[int(m.group(1))] = per.get(int(m.group(1)), 0) + 1
        else:
            fixed += 1
    counts = set(per.values())
    if sorted(per) != list(range(L)) or len(counts) != 1:
        return None
    return counts.pop(), fixed, largest_only(monos), GRAD_BYTES[dtypes.pop()]


# Kinds of the Trainer's step that verify but are left out of its files (--stack hf_trainer): their
# programs read under on real models (TinyLlama-1.1B full fine-tuning, fp32 weights, checkpointed;
# Qwen2.5-0.5B full, fp32 weights), and the untied twin of the Qwen2 one, not measured.
# tests/validation/README.md#the-trainers-step-as-step-programs. Labels: arch, tied, mode,
# targets, checkpointing, weights.
TRAINER_LEFT_OUT = ('llama 0 full - 1 fp32', 'qwen2 1 full - 0 fp32', 'qwen2 0 full - 0 fp32')


GRAD_BYTES = {'torch.bfloat16': 2, 'torch.float16': 2, 'torch.float32': 4}


class Symbolizer:
    def __init__(self, D):
        self.D = D
        self.table = {}
        for m in MONOS:
            if any(self.D[x] == 0 for x in m): continue
            v = 1
            for x in m: v *= D[x]
            for c in COEFS:
                key = c * v
                self.table.setdefault(key, []).append((c, m))
    def find(self, v):
        cands = self.table.get(v)
        if cands:
            # prefer fewest factors, then no rounded sequence, then smallest coefficient
            cands = sorted(cands, key=lambda cm: (len(cm[1]), 'S128' in cm[1], cm[0]))
            best = cands[0]
            amb = [cm for cm in cands if len(cm[1]) == len(best[1]) and cm != best]
            return {'terms': [[best[0], list(best[1])]]}, amb
        return None, []
    def symbolize(self, v):
        if v in CONSTANTS:
            return {'terms': [], 'c': v}, []
        e, amb = self.find(v)
        if e: return e, amb
        # attention backward workspace: 8*B*S*H*d + 4*B*S*H + 256 (cuDNN SDPA on this stack)
        D = self.D
        ws = 8*D['B']*D['S']*D['H']*D['d'] + 4*D['B']*D['S']*D['H'] + 256
        if v == ws:
            return {'terms': [[8, ['B','S','H','d']], [4, ['B','S','H']]], 'c': 256}, []
        # affine: monomial + small constant
        for c0 in (256, -256, 512, 1, -1, 8, -8):
            e, amb = self.find(v - c0)
            if e and len(e['terms'][0][1]) >= 1:
                e['c'] = c0
                return e, amb
        return {'terms': [], 'c': v}, []
def canonical_frees(events, cuts=()):
    """The events with each run of consecutive frees in the order of their requests, a run ending
    at each position in `cuts` (the marks: a free stays in its section). Frees with no request
    between them leave the allocator in one state whatever their order (a freed block merges with
    its free neighbours; the free ranges are the union), so the order carries nothing; and some
    runs come in an order that differs from run to run: autocast's cast cache, cleared when
    autocast exits, frees its bf16 copies of the weights in its hash map's order. The programs are
    written from traces in this order (Trace), and traces are compared with programs in it."""
    cuts = set(cuts)
    out, run = [], []
    for i, e in enumerate(events):
        if i in cuts or e > 0:
            out += sorted(run, reverse=True)  # -1, -2, ...: request order
            run = []
        if e < 0:
            run.append(e)
        else:
            out.append(e)
    return out + sorted(run, reverse=True)


def events_in_order(tr):
    """A trace's recorded events up to the 'end' mark, each run of frees in request order within
    its section (canonical_frees): what the program of its kind must give."""
    return canonical_frees(events_to_end(tr), [p for p, _ in tr.raw_marks])


def key(expr):
    if 'tensors' in expr:
        return 'tensors(%d*(%d*L+%d);%s)' % (tuple(expr['tensors']) + ('|'.join('*'.join(m) for m in expr['chunks']),))
    if 'flash' in expr:
        return 'flash_%s_accum' % expr['flash']
    if 'reduce' in expr:
        return 'reduce_%s(%s;%s)' % (expr['reduce'], '*'.join(expr['out']), '*'.join(expr['in']))
    parts = ['%d*%s' % (c, '*'.join(m)) for c, m in expr['terms']]
    if expr.get('c'): parts.append(str(expr['c']))
    return '+'.join(parts) or '0'

class Trace:
    def __init__(self, row, symbolize=True):
        self.row = row
        self.arm = row['arm']
        self.L = self.arm['shape']['layers']
        self.D = dims_of(self.arm)
        self.events = self.raw_events = row['events']
        self.marks = self.raw_marks = row.get('marks')
        self.injected = {}
        if symbolize and FLASH_SPLITS:
            self.insert_flash_accumulators()
        # allocations: ordinal -> (expr, size)
        self.alloc_expr = {}
        self.tokens = []  # (kind, payload) ; A: ordinal ; F: ordinal freed
        k = 0
        self.unknown = {}
        if not symbolize:
            return
        sym = Symbolizer(self.D)
        self.reductions = self.find_reductions()
        self.reductions.update(self.injected)
        self.reductions.update(self.find_clip_partials(sym))
        for e in canonical_frees(self.events, [p for p, _ in self.marks or ()]):
            if e > 0:
                k += 1
                ex, amb = (self.reductions[k], []) if k in self.reductions else sym.symbolize(e)
                if not ex.get('terms') and 'reduce' not in ex and 'tensors' not in ex and e >= 4096 and e not in CONSTANTS: self.unknown[e] = self.unknown.get(e, 0) + 1
                self.alloc_expr[k] = ex
                self.tokens.append(('A', k))
            else:
                self.tokens.append(('F', -e))


    def find_clip_partials(self, sym):
        """A clip (the Trainer's, or a user step's that clips first): the first request of each
        optimizer phase, when it is the float partial sums of _foreach_norm over the trainable
        tensors (tensor_chunks_size), and after it, the first request of the grads' bytes per
        tensor: the stack of the per-tensor norms (clip_grad_norm_'s torch.stack, in the grads'
        dtype), which grows with the layer count too; ordinal -> expression."""
        if not self.marks:
            return {}
        found = trainable_tensors(self.row, sym)
        if not found:
            return {}
        per_layer, fixed, monos, grad_bytes = found
        partials = {'tensors': [4, per_layer, fixed], 'chunks': [list(m) for m in monos]}
        stacked = {'tensors': [grad_bytes, per_layer, fixed], 'chunks': []}
        ords, k = [], 0
        for e in self.events:
            if e > 0: k += 1
            ords.append(k)
        out = {}
        marks = sorted(p for p, _ in self.marks)
        for pos, label in self.marks:
            if not label.endswith('.optimizer'):
                continue
            end = next((p for p in marks if p > pos), len(self.events))
            asks = [i for i in range(pos, end) if self.events[i] > 0]
            if not asks or self.events[asks[0]] != tensor_chunks_size(partials, self.D):
                continue
            out[ords[asks[0]]] = partials
            stack = next((i for i in asks[1:] if self.events[i] == tensor_chunks_size(stacked, self.D)), None)
            if stack is not None:
                out[ords[stack]] = stacked
        return out

    def insert_flash_accumulators(self):
        """After each flash forward's output and logsumexp (2 B S H d and 4 B S H bytes, then its
        16 and 8 B RNG state), the split accumulators it asks for where it splits: two requests,
        freed after the RNG state. Inserted as requests of the 'flash' sizes, which are 0 (no
        request) at the recorded dimensions; the frees and marks after them are renumbered."""
        D, ev = self.D, self.events
        out_b, lse_b = 2 * D['B'] * D['S'] * D['H'] * D['d'], 4 * D['B'] * D['S'] * D['H']
        at = [i for i in range(len(ev) - 3) if ev[i] == out_b and ev[i + 1] == lse_b and ev[i + 2] == 16 and ev[i + 3] == 8]
        if not at:
            return
        new, ren, k, n_new = [], {}, 0, 0
        shift = []   # (old position, inserted events before it)
        at_set = set(at)
        pending = {}
        for i, e in enumerate(ev):
            shift.append(len(new) - i)
            if e > 0:
                k += 1
                n_new += 1
                ren[k] = n_new
                new.append(e)
                if i - 1 in at_set:           # the logsumexp: insert the two accumulators after it
                    a = n_new + 1
                    new += [1, 1]                # placeholders; their sizes are the 'flash' exprs
                    self.injected[a] = {'flash': 'lse'}
                    self.injected[a + 1] = {'flash': 'out'}
                    n_new += 2
                    pending[i + 2] = (a, a + 1)   # freed after the RNG state's second request
                if i in pending:
                    a, b = pending.pop(i)
                    new += [-a, -b]
            else:
                new.append(-ren[-e])
        shift.append(len(new) - len(ev))
        self.events = new
        if self.marks:
            self.marks = [[p + shift[p], l] for p, l in self.marks]

    def find_reductions(self):
        """Staging buffers and semaphores of split reductions: a request, a request under 512 B,
        the second freed and then the first, nothing in between. Each is matched to the
        reduction of a [tokens, n] tensor that gives both sizes; ordinal -> expression."""
        ev, out = self.events, {}
        ords, k = [], 0
        for e in ev:
            if e > 0: k += 1
            ords.append(k)
        D = self.D
        monos = [m for m in monomials(2) if m and all(D[x] for x in m)]
        for i in range(len(ev) - 3):
            buf, sem = ev[i], ev[i + 1]
            if not (buf >= 4096 and 0 < sem < 512 and ev[i + 2] == -ords[i + 1] and ev[i + 3] == -ords[i]):
                continue
            found = [(o, n) for o in monos for n in (('B', 'S'),)
                     if reduce_sizes(mono_value(o, D), mono_value(n, D)) == (buf, sem)]
            if not found:
                continue
            if len(set(found)) > 1:
                raise ValueError('reduction of %d B reads as %s' % (buf, found))
            o, n = found[0]
            out[ords[i]] = {'reduce': 'buf', 'out': list(o), 'in': list(n)}
            out[ords[i + 1]] = {'reduce': 'sem', 'out': list(o), 'in': list(n)}
        return out


def locate(tr):
    """Cut the events at the marks into sections: an ordered list of dicts {name, j, start, end}
    (j the decoder layer, None outside the layers) covering the events up to 'end'."""
    L = tr.L
    marks = [(p, l) for p, l in tr.marks]
    pos = {l: p for p, l in marks}
    secs = []
    def add(name, j, a, b):
        secs.append({'name': name, 'j': j, 'start': a, 'end': b})
    add('build', None, 0, pos['step1.forward'])
    for s in (1, 2):
        f = 'step%d.forward' % s
        bk = 'step%d.backward' % s
        add('fpre%d' % s, None, pos[f], pos[f + '.layer0'])
        for j in range(L):
            a = pos['%s.layer%d' % (f, j)]
            b = pos['%s.layer%d' % (f, j + 1)] if j + 1 < L else pos['%s.layer_end%d' % (f, L - 1)]
            add('fwd%d' % s, j, a, b)
        add('head%d' % s, None, pos['%s.layer_end%d' % (f, L - 1)], pos[bk])
        if '%s.layer%d' % (bk, L - 1) not in pos:
            raise ValueError('no backward mark for layer %d' % (L - 1))
        add('bpre%d' % s, None, pos[bk], pos['%s.layer%d' % (bk, L - 1)])
        for j in range(L - 1, -1, -1):
            a = pos['%s.layer%d' % (bk, j)]
            b = pos['%s.layer%d' % (bk, j - 1)] if j > 0 else pos['step%d.optimizer' % s]
            add('bwd%d' % s, j, a, b)
        add('opt%d' % s, None, pos['step%d.optimizer' % s], pos['step%d.zero_grad' % s])
        nxt = 'step%d.forward' % (s + 1) if s == 1 else 'end'
        add('zero%d' % s, None, pos['step%d.zero_grad' % s], pos[nxt])
    # every token position belongs to exactly one section, in order
    for a, b in zip(secs, secs[1:]):
        assert a['end'] == b['start'], (a, b)
    return secs

# A program: blocks in order, each a literal block (its tokens; finalize() splits it into literal
# parts and per-layer repeats, count = L - c) or a layer family (forward or backward: a section per
# layer j, a template for the middle layers and specials for the first lo and last hi).
def build_program(tr):
    L = tr.L
    secs = locate(tr)
    # where each alloc lives: ordinal -> (block_id, j, idx)
    where = {}
    blocks = []
    toks = tr.tokens

    def enc_free(ordinal, cur_j, cur_block, unit_start_ord):
        """Encode a free relative to the current position (cur_j: the current layer or rep
        coordinate, None in a literal). unit_start_ord: ordinals >= it are in the current unit."""
        b, j, idx = where[ordinal]
        if b == cur_block and unit_start_ord is not None and ordinal >= unit_start_ord:
            return ('self', ordinal - unit_start_ord)
        if j is None:
            return ('abs', b, idx)
        if cur_j is not None:
            return ('rel', b, j - cur_j, idx)
        return ('lj', b, j, idx)   # a literal refers to a layer/rep j: resolved later against L

    def section_tokens(a, b, bid, j):
        """Tokens of events a..b of block bid: layer j's section, or a literal block (j None), whose
        frees never name requests relative to a unit of their own."""
        out = []
        n = 0
        first = None
        for t in toks[a:b]:
            if t[0] == 'A':
                if first is None and j is not None: first = t[1]
                where[t[1]] = (bid, j, n)
                out.append(('A', key(tr.alloc_expr[t[1]]), tr.alloc_expr[t[1]]))
                n += 1
            else:
                out.append(('F', enc_free(t[1], j, bid, first)))
        return out

    i = 0
    while i < len(secs):
        s = secs[i]
        if s['j'] is None:
            bid = len(blocks)
            blocks.append({'kind': 'lit', 'name': s['name'], 'tokens': None})
            blocks[bid]['tokens'] = section_tokens(s['start'], s['end'], bid, None)
            i += 1
            continue
        # a layered family: consecutive sections with the same name
        name = s['name']
        fam = []
        while i < len(secs) and secs[i]['name'] == name:
            fam.append(secs[i]); i += 1
        bid = len(blocks)
        blocks.append({'kind': 'layer', 'name': name, 'sections': {}})
        for sec in fam:
            blocks[bid]['sections'][sec['j']] = section_tokens(sec['start'], sec['end'], bid, sec['j'])
    return blocks

def strip(tokens):
    return [(t[0], t[1]) if t[0] == 'A' else t for t in tokens]

def detect_reps(tokens, bid, L, maxu=600):
    """Split a literal block's tokens into literal runs and per-layer repeats.
    Returns sub-blocks: {'kind':'lit','tokens':[...]} | {'kind':'rep','unit':[...],'count':r}
    and a map alloc idx (in block) -> (sub, m, k) for allocs inside repeats."""
    n = len(tokens)
    # alloc index of each token position
    aidx = []
    a = 0
    for t in tokens:
        aidx.append(a)
        if t[0] == 'A': a += 1
    subs = []
    amap = {}          # block alloc idx -> ('rep', sub, m, k) or ('lit', sub, k)
    lit = []
    lit_alloc0 = None

    def norm(t, m, cand, mode='d'):
        """Signature of token t at repetition m of a candidate starting at alloc idx cand[0] with
        cand[1] allocs per unit. mode 'd': references move with m; 'm': against it (mirrored)."""
        if t[0] == 'A':
            return ('A', t[1])
        r = t[1]
        if r[0] == 'lj':
            return ('lj', r[1], r[2] - m, r[3]) if mode == 'd' else ('ljM', r[1], r[2] + m, r[3])
        if r[0] == 'abs' and r[1] == bid:
            idx = r[2]
            if cand is not None and cand[1] > 0 and idx >= cand[0]:
                mt, k = divmod(idx - cand[0], cand[1])
                return ('cand', mt - m, k)
            if idx in amap and amap[idx][0] == 'rep':
                _, sub, mt, k = amap[idx]
                return ('rep', sub, mt - m, k) if mode == 'd' else ('repM', sub, mt + m, k)
            return ('abs', bid, idx)
        return r

    p = 0
    while p < n:
        best = None
        for u in range(1, min(maxu, (n - p) // 2) + 1):
            unit = tokens[p:p + u]
            ua = sum(1 for t in unit if t[0] == 'A')
            cand = (aidx[p], ua)
            for mode in ('d', 'm'):
                sig0 = [norm(t, 0, cand, mode) for t in unit]
                r = 1
                while p + (r + 1) * u <= n:
                    seg = tokens[p + r * u:p + (r + 1) * u]
                    if [norm(t, r, cand, mode) for t in seg] != sig0:
                        break
                    r += 1
                if L - 2 <= r <= L + 1 and r >= 2 and u >= 2:
                    # A repeat of exactly L units first: a run of like requests (one per tensor
                    # of the clip, 9 L + 2 of them) also splits into L + 1 units of another width.
                    cov = (r == L, r * u)
                    if best is None or cov > best[0]:
                        best = (cov, u, r, ua, mode)
                    break
        if best is None:
            if not lit:
                lit_alloc0 = aidx[p]
            lit.append(tokens[p])
            if tokens[p][0] == 'A':
                amap[aidx[p]] = ('lit', len(subs), aidx[p] - lit_alloc0)
            p += 1
            continue
        if lit:
            subs.append({'kind': 'lit', 'tokens': lit}); lit = []
        _, u, r, ua, mode = best
        cand = (aidx[p], ua)
        unit = [(t if t[0] == 'A' else ('F', norm(t, 0, cand, mode))) for t in tokens[p:p + u]]
        sid = len(subs)
        subs.append({'kind': 'rep', 'unit': unit, 'count': r, 'allocs': ua, 'mode': mode})
        for m in range(r):
            for k in range(ua):
                amap[aidx[p] + m * ua + k] = ('rep', sid, m, k)
        p += r * u
    if lit:
        subs.append({'kind': 'lit', 'tokens': lit})
    return subs, amap

def finalize(blocks, L):
    """Detect repeats in literal blocks; put every reference in a form that holds for any L."""
    out = []
    amaps = {}
    for b, blk in enumerate(blocks):
        if blk['kind'] == 'lit':
            subs, amap = detect_reps(blk['tokens'], b, L)
            amaps[b] = amap
            out.append({'kind': 'seq', 'name': blk['name'], 'subs': subs})
        else:
            out.append({'kind': 'layer', 'name': blk['name'], 'down': blk['name'].startswith('bwd'),
                        'raw': blk['sections']})

    def conv(r, coord):
        kind = r[0]
        if kind in ('self', 'cand', 'rep', 'rel'):
            return r
        if kind == 'abs':
            b, idx = r[1], r[2]
            t = amaps[b][idx]
            if t[0] == 'lit':
                return ('lsub', b, t[1], t[2])
            _, sub, m, k = t
            if coord is not None:
                return ('xrep', b, sub, m - coord, k)
            cnt = out[b]['subs'][sub]['count']
            return ('xrepA', b, sub, m, k) if m < cnt - m else ('xrepE', b, sub, cnt - m, k)
        if kind == 'lj':
            b, j, k = r[1], r[2], r[3]
            if coord is not None:
                return ('ljR', b, j - coord, k)
            return ('ljA', b, j, k) if j < L - j else ('ljE', b, L - j, k)
        raise ValueError(r)

    for b, blk in enumerate(out):
        if blk['kind'] == 'seq':
            for sub in blk['subs']:
                if sub['kind'] == 'lit':
                    sub['tokens'] = [t if t[0] == 'A' else ('F', conv(t[1], None)) for t in sub['tokens']]
                else:
                    # unit stored as repetition 0; 'lj' refs were normalised by detect to j - m
                    u = []
                    for t in sub['unit']:
                        if t[0] == 'A': u.append(t); continue
                        r = t[1]
                        if r[0] == 'lj': r = ('ljR', r[1], r[2], r[3])      # already j - m
                        elif r[0] == 'ljM': r = ('ljM', r[1], r[2] - (L - 1), r[3])   # j = L-1-m+s
                        elif r[0] == 'repM':
                            cnt_t = blk['subs'][r[1]]['count']
                            r = ('repM', r[1], r[2] - (cnt_t - 1), r[3])             # mt = cnt-1-m+s
                        elif r[0] == 'abs': r = conv(r, 0)
                        u.append(('F', r))
                    sub['unit'] = u
                    sub['count_c'] = L - sub['count']
        else:
            secs = {j: [t if t[0] == 'A' else ('F', conv(t[1], j)) for t in toks]
                    for j, toks in blk['raw'].items()}
            js = sorted(secs)
            tmpl = strip(secs[js[len(js) // 2]])
            lo = 0
            while lo < L and strip(secs[lo]) != tmpl: lo += 1
            hi = 0
            while hi < L and strip(secs[L - 1 - hi]) != tmpl: hi += 1
            blk['lo'], blk['hi'] = lo, hi
            blk['consistent'] = all(strip(secs[j]) == tmpl for j in range(lo, L - hi))
            blk['template'] = secs[js[len(js) // 2]]
            blk['specials'] = {('lo', j): secs[j] for j in range(lo)}
            blk['specials'].update({('hi', k): secs[L - 1 - k] for k in range(hi)})
            del blk['raw']
    return out


def expand(prog, L, D):
    """The program's events for L layers and dims D: a list of ints like the trace's events."""
    reg = {}
    events = []
    counter = [0]
    counts = {}

    def alloc(keyt, expr):
        v = value(expr, D)
        if v == 0:              # a reduction that does not split at these dimensions
            reg[keyt] = None
            return
        counter[0] += 1
        reg[keyt] = counter[0]
        events.append(v)

    def free(keyt):
        k = reg.pop(keyt)
        if k is not None:
            events.append(-k)

    def resolve(r, ctx):
        kind = r[0]
        b, sub, c = ctx['b'], ctx.get('sub'), ctx.get('coord')
        if kind == 'self':
            return ctx['unit_key'](r[1])
        if kind == 'cand':
            return ('R', b, sub, c + r[1], r[2])
        if kind == 'rep':
            return ('R', b, r[1], c + r[2], r[3])
        if kind == 'rel':
            return ('Y', r[1], c + r[2], r[3])
        if kind == 'lsub':
            return ('L', r[1], r[2], r[3])
        if kind == 'xrep':
            return ('R', r[1], r[2], c + r[3], r[4])
        if kind == 'xrepA':
            return ('R', r[1], r[2], r[3], r[4])
        if kind == 'xrepE':
            return ('R', r[1], r[2], counts[(r[1], r[2])] - r[3], r[4])
        if kind == 'ljR':
            return ('Y', r[1], c + r[2], r[3])
        if kind == 'ljM':
            return ('Y', r[1], L - 1 - c + r[2], r[3])
        if kind == 'repM':
            return ('R', b, r[1], counts[(b, r[1])] - 1 - c + r[2], r[3])
        if kind == 'ljA':
            return ('Y', r[1], r[2], r[3])
        if kind == 'ljE':
            return ('Y', r[1], L - r[2], r[3])
        if kind == 'abs':
            return ('L', r[1], 0, r[2])
        raise ValueError(r)

    def run(tokens, ctx):
        k = 0
        for t in tokens:
            if t[0] == 'A':
                alloc(ctx['unit_key'](k), t[2]); k += 1
            else:
                free(resolve(t[1], ctx))

    for b, blk in enumerate(prog):
        if blk['kind'] == 'seq':
            for s, sub in enumerate(blk['subs']):
                if sub['kind'] == 'lit':
                    run(sub['tokens'], {'b': b, 'sub': s, 'coord': None,
                                        'unit_key': lambda k, b=b, s=s: ('L', b, s, k)})
                else:
                    n = L - sub['count_c']
                    counts[(b, s)] = n
                    for m in range(n):
                        run(sub['unit'], {'b': b, 'sub': s, 'coord': m,
                                          'unit_key': lambda k, b=b, s=s, m=m: ('R', b, s, m, k)})
        else:
            order = range(L - 1, -1, -1) if blk['down'] else range(L)
            for j in order:
                if j < blk['lo']:
                    toks = blk['specials'][('lo', j)]
                elif j > L - 1 - blk['hi']:
                    toks = blk['specials'][('hi', L - 1 - j)]
                else:
                    toks = blk['template']
                run(toks, {'b': b, 'coord': j, 'unit_key': lambda k, b=b, j=j: ('Y', b, j, k)})
    return events

# ---- serialisation to the flat int format the C++ interpreter reads -----------------------
DIM_CODE = {d: n for n, d in enumerate(['B', 'S', 'h', 'i', 'H', 'kvh', 'd', 'V', 'r', 'S1', 'S128', 'Sm1'])}
REF_CODE = {'self': 1, 'cand': 2, 'rep': 3, 'repM': 4, 'rel': 5, 'lsub': 6, 'xrep': 7, 'xrepA': 8,
            'xrepE': 9, 'ljR': 10, 'ljM': 11, 'ljA': 12, 'ljE': 13}
PHASE_CODE = {'build': 0, 'fpre': 1, 'fwd': 1, 'head': 1, 'bpre': 2, 'bwd': 2, 'opt': 3, 'zero': 4}

def serialise(prog):
    exprs, eindex = [], {}
    def ex(e):
        k = key(e)
        if k not in eindex:
            eindex[k] = len(exprs)
            exprs.append(e)
        return eindex[k]
    def toks(ts):
        out = [len(ts)]
        for t in ts:
            if t[0] == 'A':
                out += [0, ex(t[2]), 0, 0, 0]
            else:
                r = t[1]
                args = list(r[1:]) + [0] * (4 - len(r[1:]))
                out += [REF_CODE[r[0]]] + args
        return out
    body = [len(prog)]
    for blk in prog:
        name = blk['name']
        step = int(name[-1]) if name[-1].isdigit() else 0
        phase = PHASE_CODE[name.rstrip('0123456789')]
        if blk['kind'] == 'seq':
            body += [0, step, phase, len(blk['subs'])]
            for sub in blk['subs']:
                if sub['kind'] == 'lit':
                    body += [0, 0] + toks(sub['tokens'])
                else:
                    body += [1, sub['count_c']] + toks(sub['unit'])
        else:
            body += [1, step, phase, 1 if blk['down'] else 0, blk['lo'], blk['hi']]
            body += toks(blk['template'])
            for j in range(blk['lo']): body += toks(blk['specials'][('lo', j)])
            for k in range(blk['hi']): body += toks(blk['specials'][('hi', k)])
    head = [len(exprs)]
    for e in exprs:
        if 'flash' in e:
            head += [-3 if e['flash'] == 'lse' else -4, 0]
            continue
        if 'tensors' in e:
            # step_program.hpp's parse takes at most 8 products and 4096 tensors a part
            if len(e['chunks']) > 8 or not all(0 <= x <= 4096 for x in e['tensors'][1:]) or not 1 <= e['tensors'][0] <= 8:
                raise ValueError('a per-tensor size out of the file format\'s range: %s' % key(e))
            head += [-5] + list(e['tensors']) + [len(e['chunks'])]
            for m in e['chunks']:
                head += [len(m)] + [DIM_CODE[x] for x in m] + [-1] * (4 - len(m))
            head += [0]
            continue
        if 'reduce' in e:
            head += [-1 if e['reduce'] == 'buf' else -2]
            for m in (e['out'], e['in']):
                head += [len(m)] + [DIM_CODE[x] for x in m] + [-1] * (4 - len(m))
            head += [0]
            continue
        head += [len(e['terms'])]
        for c, m in e['terms']:
            f = [DIM_CODE[x] for x in m] + [-1] * (4 - len(m))
            head += [c, len(m)] + f
        head += [e.get('c', 0)]
    return head + body


# ---- main: verify programs across layer counts and write the step-program file --------------------
def variant_key(arm):
    s = arm['shape']
    # The targets as the programs name them ("all-linear", "q_proj,v_proj"); rows record the list.
    # Arms recorded before optim and lora_dropout were fields ran AdamW without dropout.
    # The Trainer's arms name their optimizer by the Trainer's default (fused AdamW) and their weights.
    optim = 'adamw-fused' if arm.get('trainer') else arm.get('optim') or 'adamw'
    return (arm['arch'], bool(s['tied_embeddings']), arm['mode'], H.targets_text(arm.get('lora_targets')) or '',
            bool(arm['gradient_checkpointing']), bool(arm['logits_retained']), optim,
            bool(arm.get('lora_dropout')), arm.get('weights') or 'bf16')


def events_to_end(tr):
    """The recorded events up to the 'end' mark (as recorded: no inserted requests)."""
    end = dict((l, p) for p, l in tr.raw_marks)['end']
    return tr.raw_events[:end]


def program_of(row):
    tr = Trace(row)
    prog = finalize(build_program(tr), tr.L)
    return tr, prog


def allocator_view(events):
    """What the allocator sees: requests rounded up to 512 B (all its block logic uses), frees."""
    return [((e + 511) // 512 * 512 if e >= 512 else 512) if e > 0 else e for e in events]


def drop_process_allocations(events, nbytes):
    """Removes from a trace the requests never freed that add up to nbytes: allocations a process
    makes once and keeps (a cuBLAS workspace of the autograd thread), present in whichever arm of
    the recording process came first. Renumbers the frees."""
    freed = set(-e for e in events if e < 0)
    k = 0
    drop = set()
    for e in events:
        if e > 0:
            k += 1
            if k not in freed and e == nbytes and not drop:
                drop.add(k)
    if not drop:
        return events
    out, k, new = [], 0, {}
    for e in events:
        if e > 0:
            k += 1
            if k in drop:
                continue
            new[k] = len(new) + 1
            out.append(e)
        else:
            out.append(-new[-e])
    return out


def large_pool(events):
    """The requests over 1 MiB (the allocator's large pool) and their frees, renumbered: the
    blocks the peak is made of. Small requests (under 1 MiB) live in 2 MiB segments of their own."""
    out, k, new = [], 0, {}
    for e in events:
        if e > 0:
            k += 1
            if e > (1 << 20):
                new[k] = len(new) + 1
                out.append(e)
        elif -e in new:
            out.append(-new[-e])
    return out


def strip_trailing_frees(events):
    n = len(events)
    while n and events[n - 1] < 0: n -= 1
    return events[:n]


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b)) if len(a) != len(b) else None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("traces")
    p.add_argument("--programs", metavar="OUT",
                   help="write the verified programs as a step-program file (include/vramfit/program_file.hpp)")
    p.add_argument("--stack", default="hf_peft", choices=("hf_peft", "hf_trainer", "libtorch"),
                   help="whose programs: the file's stack, hf-peft, hf-trainer (trace_capture.py's Trainer "
                        "arms) or libtorch (default hf_peft)")
    p.add_argument("--constants", default="",
                   help="comma-separated request sizes to keep as constants, not products of the "
                        "dimensions (the cuBLAS workspaces a LibTorch step creates in its first step)")
    p.add_argument("--check", nargs="+", default=[], metavar="TRACE",
                   help="traces of real models (trace_capture.py, one process each): the verified "
                        "program of the same kind must give their large-pool requests and frees "
                        "exactly (at batch 1 the loss makes a few small requests more)")
    p.add_argument("--exclude", action="append", default=[], metavar="'ARCH TIED MODE TARGETS GC WEIGHTS'",
                   help="a kind left out of --programs though it verifies (e.g. 'qwen2 1 full - 0 fp32'); "
                        "--stack hf_trainer leaves out TRAINER_LEFT_OUT's kinds as well. --check still "
                        "compares them")
    p.add_argument("--partial", action="store_true",
                   help="exit 0 though some kinds are rejected (they are left out of --programs), as long "
                        "as one verifies")
    a = p.parse_args(argv)
    if a.stack == 'hf_trainer':
        a.exclude += [k for k in TRAINER_LEFT_OUT if k not in a.exclude]
    global CONSTANTS, MONOS, FLASH_SPLITS
    CONSTANTS = {int(x) for x in a.constants.split(',') if x}
    if a.stack == 'libtorch':
        FLASH_SPLITS = True
        # Flash attention's backward pads the sequence to a multiple of 128 for its fp32 dq
        # accumulator and softmax sums (seqlen_q_rounded in flash-attn's mha_bwd).
        DIMS.append('S128')
        MONOS = monomials()
    if a.stack == 'hf_trainer':
        # The Trainer counts the labels that take part in the loss before each step
        # (num_items_in_batch: labels[..., 1:] != -100, summed): bool and int64 tensors of B (S - 1).
        DIMS.append('Sm1')
        MONOS = monomials()
    opener = gzip.open if a.traces.endswith('.gz') else open
    rows = [json.loads(l) for l in opener(a.traces, 'rt')]
    stack = next((r for r in rows if r.get('kind') == 'stack'), {})
    rows = [r for r in rows if r.get('kind') == 'trace']
    if any(bool(r['arm'].get('trainer')) != (a.stack == 'hf_trainer') for r in rows):
        p.error('%s: the Trainer\'s traces (arms with "trainer") go with --stack hf_trainer, and only they' % a.traces)
    if any(r['arm'].get('trainer') and "'fused': True" not in r.get('optimizer', '') for r in rows):
        p.error('%s: a Trainer trace whose optimizer is not fused AdamW (the programs are labelled adamw-fused)' % a.traces)
    groups = {}
    for r in rows:
        groups.setdefault(variant_key(r['arm']), []).append(r)
    verified = []
    left_out = {}  # verified, not written: --check still compares them
    failed = excluded = 0
    for k, rs in sorted(groups.items(), key=lambda kv: str(kv[0])):
        # the source: the deepest recording at the most common head_dim; the others check it
        rs = sorted(rs, key=lambda r: (r['arm']['shape']['head_dim'] == 64, r['arm']['shape']['layers']))
        deep = rs[-1]
        tr, prog = program_of(deep)
        dims_checked = {tr.D['d']}
        notes = []
        ok = allocator_view(events_in_order(tr)) == allocator_view(expand(prog, tr.L, tr.D))
        if not ok:
            notes.append('does not give its own trace back')
        if tr.unknown:
            notes.append('sizes not written over the dimensions: %s' % tr.unknown)
        for other in rs[:-1]:
            t2 = Trace(other)
            try:
                got = allocator_view(expand(prog, t2.L, t2.D))
            except KeyError as e:  # a free of a request the program does not make at this layer count
                ok = False
                notes.append('L=%d d=%d: the program cannot run there (frees %s, never requested)' % (t2.L, t2.D['d'], e))
                continue
            want = events_in_order(t2)
            if other['baseline'] < deep['baseline']:
                want = drop_process_allocations(want, deep['baseline'] - other['baseline'])
            want = allocator_view(want)
            if got != want and t2.D['d'] != tr.D['d']:
                notes.append('not valid at head_dim %d (differs from event %s)' % (t2.D['d'], first_difference(got, want)))
                continue
            if got != want:
                ok = False
                notes.append('L=%d d=%d: differs from event %s of %d' % (t2.L, t2.D['d'], first_difference(got, want), len(want)))
            else:
                dims_checked.add(t2.D['d'])
        if len(rs) < 2:
            notes.append('one layer count only: not cross-checked')
        status = 'ok' if ok and not tr.unknown else 'REJECTED'
        label = '%s %d %s %s %d %s' % (k[0], k[1], k[2], k[3] or '-', k[4], k[8])
        if status == 'ok' and label in a.exclude:
            a.exclude.remove(label)
            left_out[k] = prog
            excluded += 1
            print('%-9s %s verifies; left out of the file (--exclude, TRAINER_LEFT_OUT)' % ('excluded', k), flush=True)
            continue
        if status == 'ok':
            verified.append((k, prog, sorted(dims_checked)))
            notes.append('head_dim checked: %s' % sorted(dims_checked))
        else:
            failed += 1
        print('%-9s %s %s' % (status, k, '; '.join(notes)), flush=True)
    unmatched = [x for x in a.exclude if x not in TRAINER_LEFT_OUT or a.stack != 'hf_trainer']
    if unmatched:  # TRAINER_LEFT_OUT's kinds need not all be in the traces (vramfit-record: one model's)
        p.error('--exclude: no verified kind %s' % ', '.join(repr(x) for x in unmatched))
    print('%d kinds verified, %d rejected' % (len(verified), failed))
    progs = dict(left_out)
    progs.update((k, prog) for k, prog, _ in verified)
    for path in a.check:
        for row in (json.loads(l) for l in (gzip.open if path.endswith('.gz') else open)(path, 'rt')):
            if row.get('kind') != 'trace':
                continue
            arm, k = row['arm'], variant_key(row['arm'])
            if k not in progs:
                print('NO PROGRAM %s %s' % (path, k))
                failed += 0 if a.partial else 1  # --partial: kinds left out are expected
                continue
            tr = Trace(row, symbolize=False)
            got = allocator_view(expand(progs[k], tr.L, tr.D))
            if tr.marks:
                want = allocator_view(events_in_order(tr))
            else:   # no end mark: leave out the frees after the last request (the teardown)
                want, got = (strip_trailing_frees(allocator_view(canonical_frees(tr.events))),
                             strip_trailing_frees(allocator_view(canonical_frees(got))))
            same, large = got == want, large_pool(got) == large_pool(want)
            failed += 0 if large else 1
            print('%-9s %s (%s %dx%d, %d layers): %d events %s%s' % (
                'same' if same else 'LARGE SAME' if large else 'DIFFERENT', path, arm.get('model'),
                arm['batch'], arm['seq'], tr.L, len(want),
                'all the same' if same else 'first difference at %d' % first_difference(got, want),
                '' if same else ', large-pool requests %s' % ('the same' if large else 'differ at %d' % first_difference(large_pool(got), large_pool(want)))))
    if a.programs:
        write_programs(a.programs, verified, stack, a.stack)
    rejected = len(groups) - len(verified) - excluded
    check_failed = failed - rejected
    return 0 if check_failed == 0 and (rejected == 0 or (a.partial and verified)) else 1


def program_sections(flat):
    """Splits a flat program (`serialise`) into its size table and its token lists, the parts that
    programs of one stack share, and the few integers between them (block and part headers).
    Returns items: ('sec', tuple) or ('lit', int), whose concatenation is `flat`."""
    items, i = [], 0
    n = flat[0]
    i = 1
    for _ in range(n):
        t = flat[i]
        i += 1 + (6 * t + 1 if t >= 0 else 11 if t in (-1, -2) else 5 + 5 * flat[i + 4] if t == -5 else 1)
    items.append(('sec', tuple(flat[:i])))
    def lits(k):
        nonlocal i
        items.extend(('lit', x) for x in flat[i:i + k])
        i += k
    def tokens():
        nonlocal i
        k = 1 + 5 * flat[i]
        items.append(('sec', tuple(flat[i:i + k])))
        i += k
    blocks = flat[i]
    lits(1)
    for _ in range(blocks):
        kind = flat[i]
        if kind == 0:
            parts = flat[i + 3]
            lits(4)
            for _ in range(parts):
                lits(2)
                tokens()
        else:
            lo, hi = flat[i + 4], flat[i + 5]
            lits(6)
            for _ in range(1 + lo + hi):
                tokens()
    assert i == len(flat), (i, len(flat))
    return items


def stack_record(stack, ns):
    """The GPU and the software the traces were recorded on, from their stack row."""
    if ns in ('hf_peft', 'hf_trainer'):
        software = 'torch %s, transformers %s, peft %s' % (stack.get('torch', '?'), stack.get('transformers', '?'),
                                                         stack.get('peft', '?'))
        if stack.get('step'):  # a user's own step (vramfit-record --step), not the plain loop
            software += ', step %s' % stack['step']
        if ns == 'hf_trainer':
            software += ', accelerate %s, transformers.Trainer' % stack.get('accelerate', '?')
        return stack.get('gpu_name', '?'), software
    return stack.get('gpu', '?'), 'LibTorch %s' % stack.get('torch', '?')


def write_programs(path, verified, stack, ns='hf_peft'):
    """Writes the verified programs in vramfit's step-program file format (include/vramfit/program_file.hpp
    reads it): a header, the shared sections, one line per program. Version 3 (each program names
    its weights' dtype) for the Trainer's programs, where weights may be fp32 under bf16 autocast;
    version 2 for the others, whose weights are the step's dtype."""
    version = 3 if ns == 'hf_trainer' else 2
    gpu, software = stack_record(stack, ns)
    sections, index, programs = [], {}, []
    for k, prog, dims in verified:
        refs = []
        for kind, v in program_sections(serialise(prog)):
            if kind == 'lit':
                refs.append(str(v))
                continue
            if v not in index:
                index[v] = len(sections)
                sections.append(v)
            refs.append('#%d' % index[v])
        arch, tied, mode, targets, gc, ret, optim, dropout, weights = k
        if version == 2 and weights != 'bf16':
            raise ValueError('%s: weights %s need a version 3 file (the Trainer\'s stack)' % (k, weights))
        hd = (1 if 64 in dims else 0) | (2 if 128 in dims else 0)
        programs.append('p %s %d %d %s %s %d %d %s %d%s : %s' % (
            arch, 1 if tied else 0, hd, mode, targets or '-', 1 if gc else 0, 1 if ret else 0, optim,
            1 if dropout else 0, ' ' + weights if version == 3 else '', ' '.join(refs)))
    out = ['# vramfit step programs, generated by tests/validation/trace_program.py from marked allocator',
           '# traces. Do not edit: regenerate. Format: include/vramfit/program_file.hpp',
           'vramfit-programs %d' % version,
           'stack %s' % ns.replace('_', '-'),
           'gpu %s' % gpu,
           'software %s' % software,
           'sections %d' % len(sections)]
    out += ['s ' + ' '.join(str(x) for x in s) for s in sections]
    out.append('programs %d' % len(programs))
    out += programs
    out.append('end')
    with open(path, 'w') as f:
        f.write('\n'.join(out) + '\n')


if __name__ == '__main__':
    sys.exit(main())
