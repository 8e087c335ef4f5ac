// The instantiations FlashAttention-3's dispatch names that this reduced peer build (build.sh: paged caches whose
// pages TMA cannot take, bf16 and e4m3) does not compile: each throws, so a call that needs one is refused.
#include <stdexcept>
#include <cutlass/numeric_types.h>
#include "flash.h"

#define FA3_STUB(T, S, P, G) \
  template <> void run_mha_fwd_<90, T, 128, 128, S, P, false, G>(Flash_fwd_params &, cudaStream_t) { \
    throw std::runtime_error("this flash_attn_3 build has no " #T " kernel with split=" #S ", paged (not TMA)=" #P \
                             ", pack_gqa=" #G " (a reduced build: paged caches, head size 128)"); }

FA3_STUB(cutlass::bfloat16_t, false, false, false)
FA3_STUB(cutlass::bfloat16_t, false, false, true)
FA3_STUB(cutlass::bfloat16_t, true, false, true)
FA3_STUB(cutlass::float_e4m3_t, false, false, false)
FA3_STUB(cutlass::float_e4m3_t, false, false, true)
FA3_STUB(cutlass::float_e4m3_t, true, false, true)
