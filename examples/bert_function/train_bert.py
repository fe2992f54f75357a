"""Fine-tuning a (tiny) BERT through a training function of your own.

tuner calls ``train(params, context)`` once per trial: ``params`` holds the trial's
sampled values (``lr``, ``warmup``, ``dropout``, ...), ``context`` the epochs to train
(``max_epochs``), the device, and ``report``, which hands tuner one epoch's metrics and
a checkpoint folder. A retried or resumed trial gets that checkpoint back as
``context.checkpoint``.

Everything is made here, offline: a toy topic-classification data set (a sentence's
label is the topic its content words come from), a word-level tokenizer over its
vocabulary, and a BERT with a small config (no pretrained weights, nothing downloaded).
"""

from __future__ import annotations

import math
import random

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

TOPICS = {
    "sport": "goal match team coach referee stadium league striker keeper season score tackle".split(),
    "food": "pasta bread soup cheese recipe kitchen oven salad spice dinner flavour baker".split(),
    "weather": "rain storm cloud sunny forecast wind snow thunder humid breeze frost drizzle".split(),
}
FILLER = "the a it was and then we saw very quite today this that some of in on".split()
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def sentences(count: int, seed: int) -> tuple[list[str], list[int]]:
    """``count`` sentences of filler words with 2 to 4 words of one topic (the label) and,
    in half of them, one word of another topic as noise."""
    rng = random.Random(seed)
    names = sorted(TOPICS)
    texts, labels = [], []
    for _ in range(count):
        label = rng.randrange(len(names))
        words = rng.choices(FILLER, k=rng.randint(5, 9)) + rng.choices(TOPICS[names[label]], k=rng.randint(2, 4))
        if rng.random() < 0.5:
            words.append(rng.choice(TOPICS[names[(label + rng.randint(1, len(names) - 1)) % len(names)]]))
        rng.shuffle(words)
        texts.append(" ".join(words))
        labels.append(label)
    return texts, labels


def tokenizer_for(texts: list[str]) -> PreTrainedTokenizerFast:
    """A word-level tokenizer over the words of ``texts``: [CLS] words [SEP], padded."""
    vocab = {token: i for i, token in enumerate(SPECIAL)}
    for word in sorted({w for text in texts for w in text.split()}):
        vocab[word] = len(vocab)
    core = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    core.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )


def encode(tokenizer: PreTrainedTokenizerFast, texts: list[str], labels: list[int]) -> dict[str, torch.Tensor]:
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"], "labels": torch.tensor(labels)}


def batches(data: dict[str, torch.Tensor], size: int, device: torch.device, generator: torch.Generator | None = None):
    count = len(data["labels"])
    order = torch.randperm(count, generator=generator) if generator is not None else torch.arange(count)
    for begin in range(0, count, size):
        index = order[begin : begin + size]
        yield {name: values[index].to(device) for name, values in data.items()}


def train(params: dict, context) -> None:
    lr = params.get("lr", 3e-3)
    batch_size = params.get("batch_size", 16)
    warmup = params.get("warmup", 0.1)  # share of all steps spent warming the learning rate up
    dropout = params.get("dropout", 0.1)
    torch.manual_seed(0)

    train_texts, train_labels = sentences(params.get("train_size", 1600), seed=0)
    val_texts, val_labels = sentences(400, seed=1)
    tokenizer = tokenizer_for(train_texts)
    train_set = encode(tokenizer, train_texts, train_labels)
    val_set = encode(tokenizer, val_texts, val_labels)

    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
        num_labels=len(TOPICS),
        pad_token_id=tokenizer.pad_token_id,
    )
    model = BertForSequenceClassification(config).to(context.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    steps_per_epoch = math.ceil(len(train_labels) / batch_size)
    total, warm = steps_per_epoch * context.max_epochs, max(1, int(warmup * steps_per_epoch * context.max_epochs))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min((step + 1) / warm, max(0.0, (total - step) / max(1, total - warm)))
    )

    start = 0
    if context.checkpoint is not None:  # a retry, a resumed sweep or PBT's exploit
        state = torch.load(context.checkpoint / "state.pt", map_location=context.device)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        start = context.start_epoch

    generator = torch.Generator().manual_seed(start)
    folder = context.trial_dir / "last"
    folder.mkdir(parents=True, exist_ok=True)
    for epoch in range(start, context.max_epochs):
        model.train()
        for batch in batches(train_set, batch_size, context.device, generator):
            optimizer.zero_grad()
            model(**batch).loss.backward()
            optimizer.step()
            schedule.step()

        model.eval()
        correct, loss_sum = 0, 0.0
        with torch.no_grad():
            for batch in batches(val_set, 256, context.device):
                output = model(**batch)
                loss_sum += output.loss.item() * len(batch["labels"])
                correct += (output.logits.argmax(-1) == batch["labels"]).sum().item()
        state = {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "schedule": schedule.state_dict(),
            "epoch": epoch + 1,
        }
        torch.save(state, folder / "state.pt")
        metrics = {"val_accuracy": correct / len(val_labels), "val_loss": loss_sum / len(val_labels)}
        context.report(metrics, checkpoint=folder)
