"""The language-model wing's edge: everything that knows which model, library or device it is.

``hf`` (tokenizers, chat templates, GGUF, ``save_pretrained``), ``loaders`` (``--model``: the
built-in network, a directory, a GGUF file, a factory), ``forward`` (one forward for every
causal LM) and ``llama`` (the direct Llama-family forward), ``lora`` (``peft``'s adapters),
``device`` (``--device`` and ``--dtype``), ``data`` (the prompt files' readers) and
``checkpoint`` (the state's forms on disk: ``torch.distributed.checkpoint``'s shards,
safetensors). The training loop reaches them through :class:`eligibility.lm.policy.Policy`
and :class:`eligibility.lm.checkpointer.Checkpointer` only.
"""
