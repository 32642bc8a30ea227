-- A results DB written by kgen before Alembic (schema_version 1 in kgen_meta; rounds stored from 0), as
-- `sqlite3 results.db .dump` printed it. Made with kgen at commit 6f7af9b: `kgen search --problem softmax
-- --rounds 2 --candidates 2 --language triton --size small` on a CPU (run 1: four correct candidates),
-- then, through kgen.store, an openai run (run 2: an LLM call with code that was rejected, one with no code)
-- and a baseline row. tests/test_db_migrations.py upgrades it and checks that every row is kept.
PRAGMA foreign_keys=OFF;
BEGIN TRANSACTION;
CREATE TABLE kgen_meta (
	"key" VARCHAR(64) NOT NULL, 
	value TEXT NOT NULL, 
	PRIMARY KEY ("key")
);
INSERT INTO kgen_meta VALUES('schema_version','1');
CREATE TABLE runs (
	id INTEGER NOT NULL, 
	problem VARCHAR(200) NOT NULL, 
	problem_path TEXT NOT NULL, 
	problem_hash VARCHAR(32) NOT NULL, 
	size VARCHAR(16) NOT NULL, 
	proposer VARCHAR(32) NOT NULL, 
	model VARCHAR(200), 
	language VARCHAR(16) NOT NULL, 
	seed INTEGER NOT NULL, 
	rounds_planned INTEGER NOT NULL, 
	rounds_done INTEGER NOT NULL, 
	candidates_per_round INTEGER NOT NULL, 
	settings JSON NOT NULL, 
	status VARCHAR(16) NOT NULL, 
	device VARCHAR(200), 
	kgen_version VARCHAR(32), 
	created_at DATETIME NOT NULL, 
	finished_at DATETIME, 
	PRIMARY KEY (id)
);
INSERT INTO runs VALUES(1,'softmax','/work/wt-db/problems/softmax.py','fd282a0ede1a2a7d','small','offline',NULL,'triton',0,2,2,2,'{"problem": "softmax", "rounds": 2, "candidates": 2, "proposer": "offline", "language": "triton", "size": "small", "seed": 0, "timeout_s": 300.0, "model": null, "base_url": null, "api_key_env": null, "prompts_dir": null, "replay_db": null, "replay_run": null, "proposer_options": {}, "overlap": true, "gpus": 0, "process": {"host": "vm", "pid": 8176}}','finished','cpu','0.1.0','2026-11-23 19:43:49.029973','2026-11-23 19:44:43.662835');
INSERT INTO runs VALUES(2,'softmax','/p/softmax.py','abc','small','openai','gpt-test','triton',0,1,1,2,'{"problem": "softmax"}','finished','cpu','0.1.0','2026-11-23 19:44:53.761746','2026-11-23 19:44:53.800924');
CREATE TABLE baselines (
	id INTEGER NOT NULL, 
	problem VARCHAR(200) NOT NULL, 
	problem_hash VARCHAR(32) NOT NULL, 
	size VARCHAR(16) NOT NULL, 
	device VARCHAR(200) NOT NULL, 
	torch_version VARCHAR(64) NOT NULL, 
	triton_version VARCHAR(64) NOT NULL, 
	eager_ms FLOAT, 
	compile_ms FLOAT, 
	compile_max_autotune_ms FLOAT, 
	settings JSON NOT NULL, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (id), 
	UNIQUE (problem_hash, size, device, torch_version, triton_version)
);
INSERT INTO baselines VALUES(1,'softmax','abc','full','NVIDIA H100','2.13.0','3.5.0',1.25,0.9000000000000000222,0.8000000000000000444,'{"tf32": false}','2026-11-23 19:44:53.809623');
CREATE TABLE llm_calls (
	id INTEGER NOT NULL, 
	run_id INTEGER, 
	round INTEGER, 
	proposer VARCHAR(32) NOT NULL, 
	model VARCHAR(200), 
	base_url TEXT, 
	template VARCHAR(64), 
	prompt JSON, 
	response TEXT, 
	outcome VARCHAR(32) NOT NULL, 
	error TEXT, 
	tokens_in INTEGER, 
	tokens_out INTEGER, 
	latency_s FLOAT, 
	attempts INTEGER NOT NULL, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(run_id) REFERENCES runs (id)
);
INSERT INTO llm_calls VALUES(1,2,0,'openai','gpt-test',NULL,'propose','[{"role": "user", "content": "go"}]',replace('```python\nclass ModelNew: pass\n```','\n',char(10)),'ok',NULL,100,20,1.5,1,'2026-11-23 19:44:53.771391');
INSERT INTO llm_calls VALUES(2,2,0,'openai','gpt-test',NULL,'propose','[{"role": "user", "content": "go"}]','no code here','no_code','no code block',NULL,NULL,NULL,1,'2026-11-23 19:44:53.784086');
CREATE TABLE candidates (
	id INTEGER NOT NULL, 
	run_id INTEGER, 
	round INTEGER, 
	problem VARCHAR(200) NOT NULL, 
	problem_hash VARCHAR(32), 
	source TEXT NOT NULL, 
	source_hash VARCHAR(64) NOT NULL, 
	language VARCHAR(16) NOT NULL, 
	parent_ids JSON NOT NULL, 
	proposer VARCHAR(32) NOT NULL, 
	model VARCHAR(200), 
	idea TEXT, 
	origin TEXT, 
	llm_call_id INTEGER, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(run_id) REFERENCES runs (id), 
	FOREIGN KEY(llm_call_id) REFERENCES llm_calls (id)
);
INSERT INTO candidates VALUES(1,1,0,'softmax','fd282a0ede1a2a7d',replace('"""Softmax over dim 1, Triton: one program per row, two reads of the row.\n\nPass 1 streams the row in BLOCK_SIZE chunks keeping a per-lane online (max, sum-of-exp); one exp per\nelement: with d = x - m, if d > 0 the lane''s max moves to x and s = s * exp(-d) + 1, else\ns = s + exp(d).  The lanes are merged once at the end.  Pass 2 walks the row backwards (the chunks\nread last in pass 1 are the likeliest to still be in L2) and writes exp(x - M) / S with\nevict-first hints so the output stream does not push the row being re-read out of L2.\nRows in flight x 256 KB must stay well under the 50 MB L2 for pass 2 to hit: large NUM_WARPS keeps\nthe number of resident programs per SM low (the default 32 warps allows at most 2).\n"""\nimport torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n\nBLOCK_SIZE = 8192\nNUM_WARPS = 32   # 1024 threads: at most 2 rows per SM in flight, so a row is still in L2 for pass 2\n\nKGEN_TUNABLE = {\n    "BLOCK_SIZE": [1024, 2048, 4096, 8192],\n    "NUM_WARPS": [4, 8, 16, 32],\n}\n\n_NEG_BIG = -3.0e38  # finite "minus infinity": keeps (-inf) - (-inf) NaNs out of masked lanes\n\n\n@triton.jit\ndef _softmax_online_kernel(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK_SIZE: tl.constexpr):\n    row = tl.program_id(0).to(tl.int64)\n    x_row = x_ptr + row * stride_x\n    y_row = y_ptr + row * stride_y\n    offs = tl.arange(0, BLOCK_SIZE)\n\n    m = tl.full([BLOCK_SIZE], -3.0e38, tl.float32)\n    s = tl.zeros([BLOCK_SIZE], tl.float32)\n    for start in range(0, n_cols, BLOCK_SIZE):\n        cols = start + offs\n        x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)\n        d = x - m\n        gt = d > 0\n        e = tl.exp(tl.where(gt, -d, d))\n        s = tl.where(gt, s * e + 1.0, s + e)\n        m = tl.where(gt, x, m)\n\n    row_max = tl.max(m, axis=0)\n    row_sum = tl.sum(s * tl.exp(m - row_max), axis=0)\n    inv = 1.0 / row_sum\n\n    n_chunks = tl.cdiv(n_cols, BLOCK_SIZE)\n    for i in range(0, n_chunks):\n        cols = (n_chunks - 1 - i) * BLOCK_SIZE + offs\n        mask = cols < n_cols\n        x = tl.load(x_row + cols, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)\n        y = tl.exp(x - row_max) * inv\n        tl.store(y_row + cols, y, mask=mask, eviction_policy="evict_first")\n\n\nclass ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n\n    def forward(self, x: torch.Tensor) -> torch.Tensor:\n        x2 = x.contiguous()\n        assert x2.dim() == 2, "softmax starter handles 2-D input, dim=1"\n        rows, cols = x2.shape\n        y = torch.empty_like(x2)\n        if rows == 0 or cols == 0:\n            return y\n        _softmax_online_kernel[(rows,)](x2, y, cols, x2.stride(0), y.stride(0),\n                                        BLOCK_SIZE=BLOCK_SIZE, num_warps=NUM_WARPS)\n        return y\n','\n',char(10)),'41edab5a8967c2f095dea5587ee8388b677dbeab261e41aa9a8be73b697690d7','triton','[]','offline',NULL,'Softmax over dim 1, Triton: one program per row, two reads of the row.','starter softmax/triton_online_two_pass.py',NULL,'2026-11-23 19:43:53.722517');
INSERT INTO candidates VALUES(2,1,0,'softmax','fd282a0ede1a2a7d',replace('"""Softmax over dim 1, Triton: one program per row, the whole row held in registers, one read.\n\nA row of up to MAX_COLS fp32 values (65536 = 256 KB) is loaded once into the registers of one\nprogram (32 warps: 1024 threads x 64 values each), its max and sum are reduced on chip, and the output\nis written once: 8 bytes of HBM traffic per element, the memory roofline''s minimum, where the\ntwo-pass starter moves up to 12 (its second read hits L2 only in part). The price is register\npressure: 64 live fp32 values per thread at 32 warps, 128 at 16 (expect spills there), so NUM_WARPS\nis the one tunable. Rows wider than MAX_COLS take the online two-pass kernel instead.\n"""\nimport torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n\nNUM_WARPS = 32\n\nKGEN_TUNABLE = {\n    "NUM_WARPS": [8, 16, 32],\n}\n\nMAX_COLS = 65536         # the widest row held in one program''s registers\nFALLBACK_BLOCK = 8192    # rows wider than that: streamed in chunks of this many columns, read twice\n\n\n@triton.jit\ndef _softmax_row_kernel(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):\n    row = tl.program_id(0).to(tl.int64)\n    cols = tl.arange(0, BLOCK)\n    mask = cols < n_cols\n    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=float("-inf")).to(tl.float32)\n    row_max = tl.max(x, axis=0)\n    e = tl.exp(x - row_max)  # masked lanes: exp(-inf) = 0, so they add nothing to the sum\n    inv = 1.0 / tl.sum(e, axis=0)\n    tl.store(y_ptr + row * stride_y + cols, e * inv, mask=mask)\n\n\n@triton.jit\ndef _softmax_online_kernel(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):\n    # Per-lane online (max, sum of exp) over the row in chunks, merged once; then a second read writes.\n    row = tl.program_id(0).to(tl.int64)\n    offs = tl.arange(0, BLOCK)\n    m = tl.full([BLOCK], -3.0e38, tl.float32)  # finite "minus infinity": no (-inf) - (-inf) NaNs\n    s = tl.zeros([BLOCK], tl.float32)\n    for start in range(0, n_cols, BLOCK):\n        cols = start + offs\n        x = tl.load(x_ptr + row * stride_x + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)\n        d = x - m\n        gt = d > 0\n        e = tl.exp(tl.where(gt, -d, d))\n        s = tl.where(gt, s * e + 1.0, s + e)\n        m = tl.where(gt, x, m)\n    row_max = tl.max(m, axis=0)\n    inv = 1.0 / tl.sum(s * tl.exp(m - row_max), axis=0)\n    for start in range(0, n_cols, BLOCK):\n        cols = start + offs\n        mask = cols < n_cols\n        x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)\n        tl.store(y_ptr + row * stride_y + cols, tl.exp(x - row_max) * inv, mask=mask)\n\n\nclass ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n\n    def forward(self, x: torch.Tensor) -> torch.Tensor:\n        x2 = x.contiguous()\n        assert x2.dim() == 2, "softmax starter handles 2-D input, dim=1"\n        rows, cols = x2.shape\n        y = torch.empty_like(x2)\n        if rows == 0 or cols == 0:\n            return y\n        if cols <= MAX_COLS:\n            _softmax_row_kernel[(rows,)](x2, y, cols, x2.stride(0), y.stride(0),\n                                         BLOCK=triton.next_power_of_2(cols), num_warps=NUM_WARPS)\n        else:\n            _softmax_online_kernel[(rows,)](x2, y, cols, x2.stride(0), y.stride(0),\n                                            BLOCK=FALLBACK_BLOCK, num_warps=32)\n        return y\n','\n',char(10)),'f666d3b1346270054cd734fd26f4101310f137734e012f794996c7b3520c3ee9','triton','[]','offline',NULL,'Softmax over dim 1, Triton: one program per row, the whole row held in registers, one read.','starter softmax/triton_row_in_registers.py',NULL,'2026-11-23 19:43:53.759914');
INSERT INTO candidates VALUES(3,1,1,'softmax','fd282a0ede1a2a7d',replace('"""Softmax over dim 1, Triton: one program per row, two reads of the row.\n\nPass 1 streams the row in BLOCK_SIZE chunks keeping a per-lane online (max, sum-of-exp); one exp per\nelement: with d = x - m, if d > 0 the lane''s max moves to x and s = s * exp(-d) + 1, else\ns = s + exp(d).  The lanes are merged once at the end.  Pass 2 walks the row backwards (the chunks\nread last in pass 1 are the likeliest to still be in L2) and writes exp(x - M) / S with\nevict-first hints so the output stream does not push the row being re-read out of L2.\nRows in flight x 256 KB must stay well under the 50 MB L2 for pass 2 to hit: large NUM_WARPS keeps\nthe number of resident programs per SM low (the default 32 warps allows at most 2).\n"""\nimport torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n\nBLOCK_SIZE = 8192\nNUM_WARPS = 16   # 1024 threads: at most 2 rows per SM in flight, so a row is still in L2 for pass 2\n\nKGEN_TUNABLE = {\n    "BLOCK_SIZE": [1024, 2048, 4096, 8192],\n    "NUM_WARPS": [4, 8, 16, 32],\n}\n\n_NEG_BIG = -3.0e38  # finite "minus infinity": keeps (-inf) - (-inf) NaNs out of masked lanes\n\n\n@triton.jit\ndef _softmax_online_kernel(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK_SIZE: tl.constexpr):\n    row = tl.program_id(0).to(tl.int64)\n    x_row = x_ptr + row * stride_x\n    y_row = y_ptr + row * stride_y\n    offs = tl.arange(0, BLOCK_SIZE)\n\n    m = tl.full([BLOCK_SIZE], -3.0e38, tl.float32)\n    s = tl.zeros([BLOCK_SIZE], tl.float32)\n    for start in range(0, n_cols, BLOCK_SIZE):\n        cols = start + offs\n        x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)\n        d = x - m\n        gt = d > 0\n        e = tl.exp(tl.where(gt, -d, d))\n        s = tl.where(gt, s * e + 1.0, s + e)\n        m = tl.where(gt, x, m)\n\n    row_max = tl.max(m, axis=0)\n    row_sum = tl.sum(s * tl.exp(m - row_max), axis=0)\n    inv = 1.0 / row_sum\n\n    n_chunks = tl.cdiv(n_cols, BLOCK_SIZE)\n    for i in range(0, n_chunks):\n        cols = (n_chunks - 1 - i) * BLOCK_SIZE + offs\n        mask = cols < n_cols\n        x = tl.load(x_row + cols, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)\n        y = tl.exp(x - row_max) * inv\n        tl.store(y_row + cols, y, mask=mask, eviction_policy="evict_first")\n\n\nclass ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n\n    def forward(self, x: torch.Tensor) -> torch.Tensor:\n        x2 = x.contiguous()\n        assert x2.dim() == 2, "softmax starter handles 2-D input, dim=1"\n        rows, cols = x2.shape\n        y = torch.empty_like(x2)\n        if rows == 0 or cols == 0:\n            return y\n        _softmax_online_kernel[(rows,)](x2, y, cols, x2.stride(0), y.stride(0),\n                                        BLOCK_SIZE=BLOCK_SIZE, num_warps=NUM_WARPS)\n        return y\n','\n',char(10)),'749f854055784767fb25c2aded73339c51e5fc04e6128d2e7566a6df5b06b4fa','triton','[]','offline',NULL,'NUM_WARPS 32→16','retuning of starter softmax/triton_online_two_pass.py',NULL,'2026-11-23 19:43:58.846087');
INSERT INTO candidates VALUES(4,1,1,'softmax','fd282a0ede1a2a7d',replace('"""Softmax over dim 1, Triton: one program per row, the whole row held in registers, one read.\n\nA row of up to MAX_COLS fp32 values (65536 = 256 KB) is loaded once into the registers of one\nprogram (32 warps: 1024 threads x 64 values each), its max and sum are reduced on chip, and the output\nis written once: 8 bytes of HBM traffic per element, the memory roofline''s minimum, where the\ntwo-pass starter moves up to 12 (its second read hits L2 only in part). The price is register\npressure: 64 live fp32 values per thread at 32 warps, 128 at 16 (expect spills there), so NUM_WARPS\nis the one tunable. Rows wider than MAX_COLS take the online two-pass kernel instead.\n"""\nimport torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n\nNUM_WARPS = 16\n\nKGEN_TUNABLE = {\n    "NUM_WARPS": [8, 16, 32],\n}\n\nMAX_COLS = 65536         # the widest row held in one program''s registers\nFALLBACK_BLOCK = 8192    # rows wider than that: streamed in chunks of this many columns, read twice\n\n\n@triton.jit\ndef _softmax_row_kernel(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):\n    row = tl.program_id(0).to(tl.int64)\n    cols = tl.arange(0, BLOCK)\n    mask = cols < n_cols\n    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=float("-inf")).to(tl.float32)\n    row_max = tl.max(x, axis=0)\n    e = tl.exp(x - row_max)  # masked lanes: exp(-inf) = 0, so they add nothing to the sum\n    inv = 1.0 / tl.sum(e, axis=0)\n    tl.store(y_ptr + row * stride_y + cols, e * inv, mask=mask)\n\n\n@triton.jit\ndef _softmax_online_kernel(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):\n    # Per-lane online (max, sum of exp) over the row in chunks, merged once; then a second read writes.\n    row = tl.program_id(0).to(tl.int64)\n    offs = tl.arange(0, BLOCK)\n    m = tl.full([BLOCK], -3.0e38, tl.float32)  # finite "minus infinity": no (-inf) - (-inf) NaNs\n    s = tl.zeros([BLOCK], tl.float32)\n    for start in range(0, n_cols, BLOCK):\n        cols = start + offs\n        x = tl.load(x_ptr + row * stride_x + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)\n        d = x - m\n        gt = d > 0\n        e = tl.exp(tl.where(gt, -d, d))\n        s = tl.where(gt, s * e + 1.0, s + e)\n        m = tl.where(gt, x, m)\n    row_max = tl.max(m, axis=0)\n    inv = 1.0 / tl.sum(s * tl.exp(m - row_max), axis=0)\n    for start in range(0, n_cols, BLOCK):\n        cols = start + offs\n        mask = cols < n_cols\n        x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)\n        tl.store(y_ptr + row * stride_y + cols, tl.exp(x - row_max) * inv, mask=mask)\n\n\nclass ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n\n    def forward(self, x: torch.Tensor) -> torch.Tensor:\n        x2 = x.contiguous()\n        assert x2.dim() == 2, "softmax starter handles 2-D input, dim=1"\n        rows, cols = x2.shape\n        y = torch.empty_like(x2)\n        if rows == 0 or cols == 0:\n            return y\n        if cols <= MAX_COLS:\n            _softmax_row_kernel[(rows,)](x2, y, cols, x2.stride(0), y.stride(0),\n                                         BLOCK=triton.next_power_of_2(cols), num_warps=NUM_WARPS)\n        else:\n            _softmax_online_kernel[(rows,)](x2, y, cols, x2.stride(0), y.stride(0),\n                                            BLOCK=FALLBACK_BLOCK, num_warps=32)\n        return y\n','\n',char(10)),'7b666b4a5556cd9addca6d7f0abbd391a302fe67684f72500c9f4e6f690e13ce','triton','[]','offline',NULL,'NUM_WARPS 32→16','retuning of starter softmax/triton_row_in_registers.py',NULL,'2026-11-23 19:43:58.871273');
INSERT INTO candidates VALUES(5,2,0,'softmax','abc',replace('class ModelNew: pass\n','\n',char(10)),'bc89fc4b2644ce4dc8dde7a9c3d3da4e8c49fb25cf688cc2b448f40a45b0ecdc','triton','[]','openai','gpt-test',NULL,NULL,1,'2026-11-23 19:44:53.780498');
INSERT INTO candidates VALUES(6,2,0,'softmax','abc','','','unknown','[]','openai','gpt-test',NULL,NULL,2,'2026-11-23 19:44:53.785513');
CREATE TABLE evaluations (
	id INTEGER NOT NULL, 
	candidate_id INTEGER NOT NULL, 
	outcome VARCHAR(32) NOT NULL, 
	message TEXT, 
	language VARCHAR(16), 
	device VARCHAR(200) NOT NULL, 
	size VARCHAR(16) NOT NULL, 
	max_abs_err FLOAT, 
	max_rel_err FLOAT, 
	norm_rel_err FLOAT, 
	atol FLOAT, 
	rtol FLOAT, 
	runtime_ms FLOAT, 
	eager_ms FLOAT, 
	compile_ms FLOAT, 
	speedup_eager FLOAT, 
	speedup_compile FLOAT, 
	roofline_pct FLOAT, 
	torch_ops JSON NOT NULL, 
	compile_s FLOAT, 
	eval_s FLOAT, 
	torch_version VARCHAR(64), 
	triton_version VARCHAR(64), 
	cuda_version VARCHAR(64), 
	details JSON NOT NULL, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(candidate_id) REFERENCES candidates (id)
);
INSERT INTO evaluations VALUES(1,1,'correct','','triton','cpu','small',7.5608046490316382914e-08,3.4817747164531000882e-07,7.9493148920240036237e-08,1.6497831892642328618e-08,1.0000000000000000817e-05,NULL,NULL,NULL,NULL,NULL,NULL,'[]',NULL,20.740236633000222355,'2.13.0+cpu','3.9.0',NULL,'{"sandbox": {"isolation": "unshare --fork --pid --kill-child --mount-proc --net", "wall_s": 20.65}, "seeds": [1234630167, 1234630168, 1234630169, 1234630170, 1234630171], "scales": [1.0, 1.0, 1.0, 1.0, 100.0], "model_seed": 1234630166, "phases": {"reference_s": 5.462, "import_s": 0.216, "verify_s": 7.763}, "reference_ops": ["_softmax"], "cuda_builds": [], "weights": "no parameters", "kernel_launches": 1, "kernels": ["_softmax_online_kernel"], "gpu_start": 1795463045.8744874, "gpu_end": 1795463059.333569}','2026-11-23 19:44:19.444075');
INSERT INTO evaluations VALUES(2,2,'correct','','triton','cpu','small',9.8331521702910151816e-08,3.4393408961265728278e-07,8.3221488289295935149e-08,1.6348449068419909593e-08,1.0000000000000000817e-05,NULL,NULL,NULL,NULL,NULL,NULL,'[]',NULL,8.6577769049999915296,'2.13.0+cpu','3.9.0',NULL,'{"sandbox": {"isolation": "unshare --fork --pid --kill-child --mount-proc --net", "wall_s": 8.64}, "seeds": [1871699503, 1871699504, 1871699505, 1871699506, 1871699507], "scales": [1.0, 1.0, 1.0, 1.0, 100.0], "model_seed": 1871699502, "phases": {"reference_s": 5.933, "import_s": 0.153, "verify_s": 2.375}, "reference_ops": ["_softmax"], "cuda_builds": [], "weights": "no parameters", "kernel_launches": 1, "kernels": ["_softmax_row_kernel"], "gpu_start": 1795463059.5017018, "gpu_end": 1795463067.986848}','2026-11-23 19:44:28.131119');
INSERT INTO evaluations VALUES(3,3,'correct','','triton','cpu','small',7.3829861446661482204e-08,3.5626433374509600953e-07,7.8019056115799578212e-08,1.6567613553831624596e-08,1.0000000000000000817e-05,NULL,NULL,NULL,NULL,NULL,NULL,'[]',NULL,10.210320569000032264,'2.13.0+cpu','3.9.0',NULL,'{"sandbox": {"isolation": "unshare --fork --pid --kill-child --mount-proc --net", "wall_s": 10.2}, "seeds": [273822602, 273822603, 273822604, 273822605, 273822606], "scales": [1.0, 1.0, 1.0, 1.0, 100.0], "model_seed": 273822601, "phases": {"reference_s": 4.798, "import_s": 0.168, "verify_s": 5.1}, "reference_ops": ["_softmax"], "cuda_builds": [], "weights": "no parameters", "kernel_launches": 1, "kernels": ["_softmax_online_kernel"], "gpu_start": 1795463068.178485, "gpu_end": 1795463078.2538486}','2026-11-23 19:44:38.361959');
INSERT INTO evaluations VALUES(4,4,'correct','','triton','cpu','small',8.5137025429560253542e-08,3.5034096744137749972e-07,8.0363126327479385219e-08,1.6452420871064012024e-08,1.0000000000000000817e-05,NULL,NULL,NULL,NULL,NULL,NULL,'[]',NULL,5.2724655350000375619,'2.13.0+cpu','3.9.0',NULL,'{"sandbox": {"isolation": "unshare --fork --pid --kill-child --mount-proc --net", "wall_s": 5.25}, "seeds": [346845187, 346845188, 346845189, 346845190, 346845191], "scales": [1.0, 1.0, 1.0, 1.0, 100.0], "model_seed": 346845186, "phases": {"reference_s": 3.419, "import_s": 0.147, "verify_s": 1.548}, "reference_ops": ["_softmax"], "cuda_builds": [], "weights": "no parameters", "kernel_launches": 1, "kernels": ["_softmax_row_kernel"], "gpu_start": 1795463078.4050183, "gpu_end": 1795463083.5348704}','2026-11-23 19:44:43.649087');
INSERT INTO evaluations VALUES(5,6,'no_code','no code block',NULL,'-','-',NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,'[]',NULL,NULL,NULL,NULL,NULL,'{}','2026-11-23 19:44:53.789539');
INSERT INTO evaluations VALUES(6,5,'static_reject','launches no kernel of its own',NULL,'cpu','small',NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,'[]',NULL,NULL,NULL,NULL,NULL,'{}','2026-11-23 19:44:53.794653');
CREATE INDEX ix_runs_problem ON runs (problem);
CREATE INDEX ix_llm_calls_run_id ON llm_calls (run_id);
CREATE INDEX ix_candidates_problem ON candidates (problem);
CREATE INDEX ix_candidates_source_hash ON candidates (source_hash);
CREATE INDEX ix_candidates_run_id ON candidates (run_id);
CREATE INDEX ix_evaluations_outcome ON evaluations (outcome);
CREATE INDEX ix_evaluations_candidate_id ON evaluations (candidate_id);
COMMIT;
