"""xtr: XTR and T5-ColBERT multi-vector retrieval in JAX/Flax."""
import setuptools

setuptools.setup(
    name="xtr",
    version="0.1.0",
    description=("XTR (Lee et al. 2023) and T5-ColBERT in JAX/Flax: training, ScaNN token indexes, "
                 "BEIR eval."),
    packages=setuptools.find_packages(include=["xtr", "xtr.*"]),
    python_requires=">=3.10",
    # Versions tested together on CPU (Python 3.11). scann 1.4.2's TF ops need tensorflow 2.20.x.
    install_requires=[
        "jax==0.10.2",
        "jaxlib==0.10.2",
        "flax==0.12.8",
        "optax==0.2.8",
        "orbax-checkpoint==0.12.8",
        "gin-config==0.5.0",
        "seqio==0.0.20",
        "tensorflow==2.20.0",
        "tensorflow-text==2.20.1",
        "tensorflow-datasets==4.9.10",
        "scann==1.4.2",
        "sentencepiece==0.2.3",
        "tokenizers==0.23.3",
        "safetensors==0.8.0",
        "clu==0.0.12",
        "tqdm==4.70.1",
        "numpy==2.4.6",
        "pytrec-eval-terrier==0.5.11",
        "bm25s==0.3.16",
        "matplotlib==3.11.2",
    ],
    extras_require={
        "test": [
            "pytest==9.2.0", "torch==2.13.0", "transformers==5.23.0", "ruff==0.17.6", "yapf==0.43.0"
        ],
        # xtr-convert-checkpoint: the released XTR's torch files -> safetensors.
        "convert": ["torch==2.13.0"],
    },
    entry_points={
        "console_scripts": [
            "xtr-train=xtr.cli.train:console_entry_point",
            "xtr-export=xtr.cli.export:console_entry_point",
            "xtr-search=xtr.search_main:console_entry_point",
            "xtr-eval-beir=xtr.cli.eval_beir:console_entry_point",
            "xtr-demo=xtr.cli.demo:console_entry_point",
            "xtr-analyze-tokens=xtr.cli.analyze_tokens:console_entry_point",
            "xtr-adapt-alignment=xtr.cli.adapt_alignment:console_entry_point",
            "xtr-show-alignment=xtr.cli.show_alignment:console_entry_point",
            "xtr-wise-ft=xtr.cli.wise_ft:console_entry_point",
            "xtr-analyze-alignment=xtr.cli.analyze_alignment:console_entry_point",
            "xtr-convert-checkpoint=xtr.cli.convert_checkpoint:console_entry_point",
            "xtr-export-model=xtr.cli.export_model:console_entry_point",
        ],
    },
)
