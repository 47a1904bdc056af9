"""The thinker on vLLM: its engine arguments (`VllmArgs`, pure Python), the GGUF file as the HF folder vLLM
loads (`hf_folder`), the vLLM calls whose names and shapes change between vLLM versions (`vllm_api`, the one
module importing vllm) and the stage engine driving vLLM's engine from LiveServe's commands (`engine`).
Only `args` imports without vLLM installed; the rest runs in the vLLM interpreter's stage process."""
