"""The thinker on vLLM: its engine arguments (`VllmArgs`, `VllmOffload`), the GGUF file as the HF folder vLLM
loads (`hf_folder`), the vLLM calls whose names and shapes change between vLLM versions (`vllm_api`) and the
CachePolicy vLLM's KV offload loads by module path (`cache_policy`): the two modules importing vllm; the orders
they apply (`step_order`, `next_use_order`) are pure Python. The stage engine (`engine`) drives vLLM's engine from
LiveServe's commands. `args` and the orders import without vLLM installed; the rest runs in the vLLM
interpreter's stage process."""
