# Two commands do all set-up: `make run` and `make test`. CMake does the build.
JOBS ?= 2
BUILD ?= build
ASAN_BUILD ?= build-asan
RUN_ARGS ?= --model mnist-cnn --data fashion-mnist --device auto --epochs 1 --batch-size 64 \
            --optimizer adadelta --lr 1.0 --lr-step-gamma 0.7 --seed 1 --save run.safetensors

FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_SMOKE_SECONDS ?= 6

.PHONY: all deps run test test-fast test-asan test-gpu gpu-bundle fuzz fuzz-smoke fuzz-build bench bench-loader bench-http bench-train-data bench-gpu fixtures interop clean

all: $(BUILD)/kiln

deps:
	@bash scripts/install-deps.sh

$(BUILD)/Makefile: CMakeLists.txt
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null

$(BUILD)/kiln: $(BUILD)/Makefile FORCE
	@cmake --build $(BUILD) -j $(JOBS)

run: deps
	@$(MAKE) --no-print-directory all
	$(BUILD)/kiln train $(RUN_ARGS)

# the suite (JOBS tests at once, those resting on timings alone: RUN_SERIAL in CMakeLists.txt), then again
# under ASan + UBSan + LeakSanitizer, then every fuzz target for FUZZ_SMOKE_SECONDS
test:
	@bash scripts/install-deps.sh --test
	@$(MAKE) --no-print-directory all
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	@$(MAKE) --no-print-directory test-asan
	@$(MAKE) --no-print-directory fuzz-smoke

test-fast: all
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# ASan + UBSan over the whole suite (the long end-to-end runs shrink themselves under KILN_SANITIZE); without
# nvcc's objects: no GPU runs them here, and the CUDA kernels' host build (simt) is checked in it. JOBS tests at
# once: they look for memory errors, not speed (the release run above holds the timing checks,
# each alone);
# OpenMP's idle threads sleep rather than spin, so two tests' teams share the cores (413-505 s one at a time on 2
# cores, 293-302 s two at a time, 2026-11-30)
test-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DKILN_SANITIZE=ON -DKILN_CUDA=OFF >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && KILN_SANITIZE=1 ASAN_OPTIONS=detect_leaks=1 OMP_WAIT_POLICY=passive ctest --output-on-failure -j $(JOBS)

# libFuzzer targets for the readers of untrusted input (tests/fuzz, built with clang):
# each runs FUZZ_SECONDS from its committed seed corpus (copied, never changed);
# a crash, hang, leak or blow-up fails, keeping the input in $(FUZZ_BUILD)/artifacts
fuzz-build:
	@bash scripts/install-deps.sh --test
	@cmake -S tests/fuzz -B $(FUZZ_BUILD) -DCMAKE_C_COMPILER=clang >/dev/null
	@cmake --build $(FUZZ_BUILD) -j $(JOBS)

fuzz: fuzz-build
	FUZZ_BUILD=$(FUZZ_BUILD) bash tests/fuzz/run.sh $(FUZZ_SECONDS)

# what `make test` runs: every target for FUZZ_SMOKE_SECONDS, so CI keeps fuzzing
fuzz-smoke: fuzz-build
	FUZZ_BUILD=$(FUZZ_BUILD) bash tests/fuzz/run.sh $(FUZZ_SMOKE_SECONDS)

# on a GPU machine: every op on the CUDA backend against the double reference, the
# golden run, graph replay, determinism, cross-device resume, and a short training
# run (the GPU tests skip, exit 77, without a GPU)
test-gpu: deps
	@$(MAKE) --no-print-directory all
	cd $(BUILD) && ctest --output-on-failure -j 1 -R 'test_cuda|test_mma_gpu|test_ops|test_gpt|test_models|test_attention_tc|test_conv_half'
	$(BUILD)/kiln train --device cuda --model mnist-cnn --data fashion-mnist --epochs 1 --max-steps 300 --no-test

# kiln against PyTorch 2.x on the same GPU (needs python3 with CUDA PyTorch)
bench-gpu: deps
	@$(MAKE) --no-print-directory all
	bash bench/gpu.sh
	bash bench/gpu_models.sh

# for a lent GPU machine, which cannot build kiln: the binaries, every library they load but the C
# runtime's and CUDA's, and Fashion-MNIST in gpu-bundle.tar.xz; carry it there and run
# scripts/gpu_session.sh (STAGES="info test sanitize train bench models")
gpu-bundle: deps
	@$(MAKE) --no-print-directory all
	bash scripts/gpu_bundle.sh $(BUILD)

# kiln against PyTorch on the same work (needs python3-torch and ../shared/bench/pytorch_mnist.py)
bench: deps
	@bash scripts/install-deps.sh --bench
	@$(MAKE) --no-print-directory all
	bash bench/mnist_epoch.sh

# the guide's num_workers x pin_memory table: kiln's loader against PyTorch's DataLoader
# (torchvision ImageFolder) on a 64x64 JPEG folder from Fashion-MNIST (needs ../shared/bench/peers)
bench-loader: deps
	@bash scripts/install-deps.sh --bench
	@$(MAKE) --no-print-directory all
	bash bench/loader.sh

# does training wait for data? mnist-cnn from IDX, from a JPEG folder (--workers auto), and with --cache
bench-train-data: deps
	@$(MAKE) --no-print-directory all
	bash bench/train_data.sh

# shards over HTTP (nginx on loopback) against the same shards on disk: kiln bench loader, medians
bench-http: deps
	@bash scripts/install-deps.sh --test
	@$(MAKE) --no-print-directory all
	bash bench/http.sh

# where loading time goes: a JPEG folder against its encoded and decoded shards, and --cache's first and second epoch
.PHONY: bench-shards
bench-shards: deps
	@$(MAKE) --no-print-directory all
	bash bench/shards.sh

# the doctor's five slow configurations: slow, what --apply reaches, the best found by hand (no PyTorch needed)
.PHONY: bench-doctor
bench-doctor: deps
	@$(MAKE) --no-print-directory all
	bash bench/doctor.sh

# resnet20 (batch 128) and resnet18 (batch 32, 112x112) training and inference steps beside PyTorch
# in fp32, bf16 and auto; PyTorch in both formats, fp32 and autocast bf16 (needs python3-torch, torchvision; bench/peers/resnet_peer.py)
.PHONY: bench-resnet
bench-resnet: deps
	@bash scripts/install-deps.sh --bench
	@$(MAKE) --no-print-directory all
	bash bench/resnet.sh

# the guide's conv table: nn.Conv2d 64 3x3 filters on 32x64x64x64, forward and forward+backward, kiln with
# autotune off and on beside PyTorch default and channels_last (needs python3-torch and ../shared/bench/peers/w2_conv.py)
.PHONY: bench-conv
bench-conv: deps
	@bash scripts/install-deps.sh --bench
	@$(MAKE) --no-print-directory all
	bash bench/conv.sh

.PHONY: bench-checkpoint
bench-checkpoint: deps
	@bash scripts/install-deps.sh --bench
	@$(MAKE) --no-print-directory all
	bash bench/checkpoint.sh

# data parallel: mnist-cnn and resnet20 as 1 process x 2 threads and 2 processes x 1 thread (mpirun),
# beside PyTorch DDP (gloo); exposed all-reduce with and without overlap (needs python3-torch)
.PHONY: bench-ddp
bench-ddp: deps
	@bash scripts/install-deps.sh --bench
	@$(MAKE) --no-print-directory all
	bash bench/ddp.sh

# the GPT training step (4 layers, 256 wide, block 128, batch 8) beside PyTorch's nanoGPT at 1 and 2 threads
# (needs python3-torch and ../shared/bench/peers/w8_gpt.py)
.PHONY: bench-gpt
bench-gpt: deps
	@bash scripts/install-deps.sh --bench
	@$(MAKE) --no-print-directory all
	bash bench/gpt.sh

# the guide's GELU table: the five-node chain unfused and fused at 1M elements, kernels and us, beside PyTorch
# eager, torch.jit.script and F.gelu, and GB/s at 16M against the measured memory bandwidth
# (needs python3-torch and ../shared/bench/peers/w3_gelu_fusion.py)
.PHONY: bench-pointwise
bench-pointwise: deps
	@bash scripts/install-deps.sh --bench
	@$(MAKE) --no-print-directory all
	bash bench/pointwise.sh

# regenerate the PyTorch fixtures (needs python3-torch; CI uses the committed ones)
fixtures:
	@bash scripts/install-deps.sh --oracle
	/usr/bin/python3 tests/ref/make_fixtures.py tests/ref/fixtures

# kiln checkpoints (mnist-cnn, mnist-cnn-bn) load in PyTorch and score the same there
# (needs python3-torch and ../shared/bench/pytorch_mnist.py beside the repository)
interop: deps
	@bash scripts/install-deps.sh --oracle
	@$(MAKE) --no-print-directory all
	bash tests/ref/interop.sh

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)

FORCE:
