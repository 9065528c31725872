# The cpu kernels' per-file compile options, shared by kiln's build and the
# fuzz build (tests/fuzz/CMakeLists.txt): the *_avx512.c and *_avx2.c files
# for their instruction sets (each chosen at run time by cpu_internal.h's
# kiln_cpu_has_avx512 / kiln_cpu_has_avx2), and the files whose loops need a
# floating-point option to vectorise. `root`: the repository.
function(kiln_cpu_kernel_flags root)
  file(GLOB avx512 CONFIGURE_DEPENDS ${root}/src/kernels/cpu/*_avx512.c)
  set_source_files_properties(${avx512} PROPERTIES COMPILE_OPTIONS "-mavx512f;-mavx512bw;-mavx512dq;-mavx512vl;-mfma")
  # their twins for CPUs with AVX2 but not AVX-512 (AMD Zen 1-3, Intel client cores)
  file(GLOB avx2 CONFIGURE_DEPENDS ${root}/src/kernels/cpu/*_avx2.c)
  set_source_files_properties(${avx2} PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma")
  # kernels with polynomial math (src/kernels/cpu/vec_math.h) in target_clones: ISO C mode
  # keeps GCC from fusing multiply-adds, which their AVX-512 and AVX2 clones need
  set_source_files_properties(${root}/src/kernels/cpu/gelu.c ${root}/src/kernels/cpu/softmax.c
                              ${root}/src/kernels/cpu/layer_norm.c ${root}/src/kernels/cpu/attention.c
                              ${root}/src/kernels/cpu/losses.c ${root}/src/kernels/cpu/log_softmax.c
                              PROPERTIES COMPILE_OPTIONS "-ffp-contract=fast")
  # the portable optimizer loops' sqrtf vectorises only without errno (sqrt is exact: the same bits)
  set_source_files_properties(${root}/src/kernels/cpu/optim.c PROPERTIES COMPILE_OPTIONS "-fno-math-errno")
endfunction()
