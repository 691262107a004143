"""The token index: every document token vector of a corpus on disk, searched exactly or with ScaNN.

One index directory (a sharded export writes one per shard, `files.shard_path(root, s, n)`, and
`reader.open_index(root)` fans out over them as one index):

  writer.json                 the writer's settings (model, corpus, ...): a killed export resumes
                              with them and refuses other ones
  export.lock                 held (flock) while an export or repair writes ("export by …" or
                              "repair by …"); removed when it completes
  vocabulary/<name>           a copy of the model's vocabulary file, which the manifest's model
                              records by this relative path (search reads it, never a path
                              outside the index)
  chunks/vectors-00000.npy    [T_c, D] float32|float16 token vectors of chunk 0
  chunks/doc_index-00000.npy  [T_c] int32 doc index (within this directory) of each token
                              (an XTR-only index, exported with --store_vectors=none, keeps
                              neither vectors nor doc index chunks: doc_offsets locates tokens)
  chunks/salience-00000.npy   [T_c] float32 salience u of each token (a model with salience heads)
  chunks/chunk-00000.json     doc ids, doc lengths, sha256 and size of the .npy files of chunk 0;
                              written after them, so its presence marks the chunk complete
  scann/                      the serialized ScaNN searcher over all T tokens (relative paths), or
                              over the tokens kept by salience pruning (`prune_doc`)
  scann_tokens.npy            [T'] int64 token of each ScaNN row (pruned or updated indexes)
  doc_ids.jsonl               one JSON string per line: doc index -> corpus doc id
  doc_offsets.npy             [N + 1] int64: doc i owns token rows offsets[i]:offsets[i + 1]
  deleted_docs.npy            [n] int64 docs deleted by updates (tombstones: in no token
                              retrieval; listed only when there are some)
  manifest.json               written last: its presence means the index is complete; lists
                              every file above with its sha256 and size
  verified.json               written by readers: which large files were verified, when (`verify`)

An update in place (`update`: `xtr-export --add/--delete`) adds chunks and writes the files that
change — doc ids, offsets, scann/, scann_tokens, deleted_docs — under the next generation's names
(doc_ids.g1.jsonl, scann.g1/, ...; `files.names`), which the manifest records ("generation").

Every name in the directory is untrusted: files are written and read through `xtr.io`
(O_EXCL | O_NOFOLLOW, regular files only, paths resolved inside the directory).

Modules: `files` (layout, atomic writes, checksums), `scann` (build and serialize ScaNN),
`scann_search` (load ScaNN without pickle or TensorFlow, search it), `exact` (brute-force token
search), `writer` (`IndexWriter`: resumable, locked, repairable), `update` (add and delete
documents in place), `verify`
(checking files against the manifest) and `reader` (`open_index`, `TokenIndex`).
"""
