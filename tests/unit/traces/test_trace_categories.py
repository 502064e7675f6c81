import pytest

from vllm_ops.traces import Classifier, Rule, TraceInputError, parse_rules

CASES = [
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "kernel", "allreduce"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "kernel", "allreduce"),
    ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, "
     "vllm::Signal*, __nv_bfloat16*, int, int)", "kernel", "allreduce"),
    ("void vllm::cross_device_reduce_2stage<float, 4>(...)", "kernel", "allreduce"),
    ("void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, unsigned long)",
     "kernel", "allreduce"),
    ("void c10d::symmetric_memory::one_shot_all_reduce_kernel<float, 8>(...)", "kernel", "allreduce"),
    ("void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport<true, 8, "
     "__nv_bfloat16, float, false>(flashinfer::trtllm_allreduce_fusion::AllReduceFusionParams<__nv_bfloat16>)",
     "kernel", "allreduce"),
    ("void tensorrt_llm::kernels::ar_fusion::allreduce_fusion_kernel_twoshot_sync<(tensorrt_llm::kernels::"
     "ar_fusion::AllReduceFusionPattern)1, __nv_bfloat16, 8, false>(...)", "kernel", "allreduce"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "kernel", "collective"),
    ("ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "kernel", "collective"),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "kernel", "collective"),
    ("void marlin_moe_wna16::Marlin<(vllm::ScalarTypeId)4, ...>(...)", "kernel", "moe_gemm"),
    ("fused_moe_kernel", "kernel", "moe_gemm"),
    ("bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM_TN_transOut",
     "kernel", "moe_gemm"),
    ("void moe::dev::routing::routingIndicesHistogramKernel<moe::dev::routing::routingRenormalize::"
     "KernelParams<__nv_bfloat16, __nv_bfloat16, 128, false, true, true> >(...)", "kernel", "moe_gemm"),
    ("void moe::dev::finalize::finalizeKernelVecLoad<moe::dev::finalize::KernelParams<cutlass::bfloat16_t, "
     "cutlass::bfloat16_t, 4, true> >(...)", "kernel", "moe_gemm"),
    ("void vllm::moe::topkGatingSoftmax<8, 128, 4, 16>(float const*, bool const*, float*, int, int*, int*, "
     "int, int, int)", "kernel", "moe_gemm"),
    ("void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, "
     "cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> >, false>(...)",
     "kernel", "attention"),
    ("fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvCausalP16VarSeqQ128Kv128PersistentContext", "kernel", "attention"),
    ("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, unsigned char, (vllm::Fp8KVCacheDataType)1>(...)",
     "kernel", "attention"),
    ("void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*)", "kernel", "attention"),
    ("kernel_unified_attention_2d", "kernel", "attention"),
    ("void marlin::Marlin<(vllm::ScalarTypeId)4, 256, 1, 8, 8, 8, true, 4, 8, false>(int4 const*, int4 const*)",
     "kernel", "gemm"),
    ("nvjet_sm90_tst_64x8_64x16_2x1_v_bz_NNT", "kernel", "gemm"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_warpgroupsize1x1x1_execute_segment_k_off_kernel",
     "kernel", "gemm"),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16>(...)", "kernel", "gemm"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>(...)",
     "kernel", "gemm"),
    ("std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type "
     "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, long)", "kernel", "norm"),
    ("void vllm::rms_norm_kernel<c10::BFloat16, 8, 2>(c10::BFloat16*, c10::BFloat16 const*)", "kernel", "norm"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float, true>(...)",
     "kernel", "norm"),
    ("void vllm::scaled_fp8_quant_kernel_strided<c10::BFloat16, c10::Float8_e4m3fn>(...)", "kernel", "quantize"),
    ("void tensorrt_llm::kernels::quantize_with_block_size<(tensorrt_llm::BlockScaleQuantizationType)2, "
     "__nv_bfloat16, 32, true>(...)", "kernel", "quantize"),
    ("void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::BFloat16>, "
     "std::array<char*, 3ul> >(...)", "kernel", "elementwise"),
    ("void vllm::act_and_mul_kernel<c10::BFloat16, &(c10::BFloat16 vllm::silu_kernel<c10::BFloat16>"
     "(c10::BFloat16 const&)), true>(c10::BFloat16*, c10::BFloat16 const*, int)", "kernel", "elementwise"),
    ("triton_poi_fused_add_bitwise_and_0", "kernel", "elementwise"),
    ("Memcpy DtoD (Device -> Device)", "gpu_memcpy", "memcpy"),
    ("Memset (Device)", "gpu_memset", "memset"),
    ("some_unknown_kernel_xyz", "kernel", "other"),
]


@pytest.mark.parametrize(("name", "cat", "expected"), CASES)
def test_builtin_table(name, cat, expected):
    assert Classifier().classify(name, cat) == expected


def test_every_documented_category_is_exercised():
    covered = {expected for _, _, expected in CASES}
    assert covered == set(Classifier().categories)


def test_user_rules_go_first_and_may_add_categories():
    c = Classifier(parse_rules(["sampler=(?i)sampling|topk_topp", "gemm=^my_gemm$"]))
    assert c.classify("flashinfer_sampling_kernel") == "sampler"
    assert c.classify("my_gemm") == "gemm"
    assert c.categories[0] == "sampler"
    assert c.categories[-3:] == ["memcpy", "memset", "other"]


@pytest.mark.parametrize("spec", [
    {"sampler": "sampling"},
    {"sampler": ["sampling"]},
    [{"name": "sampler", "pattern": "sampling"}],
    ["sampler=sampling"],
])
def test_parse_rules_accepts_each_shape(spec):
    assert parse_rules(spec) == [Rule("sampler", "sampling", "user rule")]


@pytest.mark.parametrize(("spec", "message"), [
    (["no-equals-sign"], "expected NAME=REGEX"),
    ([42], "expected NAME=REGEX"),
    ({"x": 3}, "expected a regex"),
    ([{"name": "", "pattern": "a"}], "non-empty string"),
    ([{"name": "x", "pattern": ""}], "non-empty string"),
    ("x=y", "expected a list or a mapping"),
])
def test_parse_rules_rejects_bad_shapes(spec, message):
    with pytest.raises(TraceInputError, match=message):
        parse_rules(spec)


def test_invalid_regex_is_a_clean_error():
    with pytest.raises(TraceInputError, match="category 'x': invalid regular expression"):
        Classifier(parse_rules(["x=("]))
