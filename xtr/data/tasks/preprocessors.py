"""seqio preprocessing shared by the retrieval tasks: text -> token ids with special tokens."""
from collections.abc import Mapping

import seqio
import tensorflow as tf

from xtr.text import vocabularies

TEXT_FEATURES = ("query", "positive", "negative")


def output_features(vocabulary: seqio.Vocabulary) -> dict[str, seqio.Feature]:
  """The tasks' features: token ids [length] int32 of each text (specials added by `tokenize`)."""
  return {name: seqio.Feature(vocabulary, add_eos=False, dtype=tf.int32) for name in TEXT_FEATURES}


@seqio.map_over_dataset
def tokenize(features: Mapping[str, tf.Tensor], output_features: Mapping[str, seqio.Feature],
             sequence_length: Mapping[str, int]) -> dict[str, tf.Tensor]:
  """Tokenizes every text feature with `xtr.text.vocabularies.tokenize_tf` (lowercase, trim,
  specials).

  Args:
    features: {name: [] string} for each name in `TEXT_FEATURES`.
    output_features: the task's features (their vocabulary tokenizes).
    sequence_length: max ids of each feature, special tokens included.

  Returns:
    {name: [<= sequence_length[name]] int32}.
  """
  return {
      name:
          vocabularies.tokenize_tf(output_features[name].vocabulary, features[name][None],
                                   sequence_length[name])[0] for name in TEXT_FEATURES
  }
