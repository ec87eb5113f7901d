package pybind

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/journal"
	"github.com/lance-segmerge/lance-segmerge/gokernel/segment"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
)

func openStore(ctx context.Context, uri, optionsJSON string) (storage.Store, error) {
	opts, err := decodeOptions(optionsJSON)
	if err != nil {
		return nil, err
	}
	return storage.Open(ctx, uri, opts)
}

// JournalRead returns the run journal of an index as JSON, "" when there
// is none; a journal that does not parse or validate is a "[corrupt]"
// error.
func JournalRead(uri, optionsJSON, indexName string) (out string, err error) {
	defer recoverTo(&err)
	ctx := context.Background()
	st, err := openStore(ctx, uri, optionsJSON)
	if err != nil {
		return "", tagged(err)
	}
	j, err := journal.Read(ctx, st, indexName)
	if errors.Is(err, errkind.NotFound) {
		return "", nil
	}
	if err != nil {
		return "", tagged(err)
	}
	b, err := json.Marshal(j)
	return string(b), tagged(err)
}

// JournalWrite validates and writes (replaces) a run journal given as JSON.
func JournalWrite(uri, optionsJSON, journalJSON string) (err error) {
	defer recoverTo(&err)
	ctx := context.Background()
	var j journal.Journal
	if err := json.Unmarshal([]byte(journalJSON), &j); err != nil {
		return tagged(fmt.Errorf("%w: run journal JSON: %w", errkind.InvalidInput, err))
	}
	st, err := openStore(ctx, uri, optionsJSON)
	if err != nil {
		return tagged(err)
	}
	return tagged(journal.Write(ctx, st, &j))
}

// JournalDelete removes the run journal of an index, if any.
func JournalDelete(uri, optionsJSON, indexName string) (err error) {
	defer recoverTo(&err)
	ctx := context.Background()
	st, err := openStore(ctx, uri, optionsJSON)
	if err != nil {
		return tagged(err)
	}
	return tagged(journal.Delete(ctx, st, indexName))
}

// VerifyOutput checks a merge output recorded in a run journal (see
// segment.VerifyOutput): inputsJSON is the JSON list of the task's input
// segments, filesJSON the output's recorded files ("" or "[]" when
// unknown). Returns the output segment's info, with statistics, as JSON.
func VerifyOutput(uri, optionsJSON, inputsJSON, output, filesJSON string) (string, error) {
	return offThread(func() (string, error) { return verifyOutput(uri, optionsJSON, inputsJSON, output, filesJSON) })
}

func verifyOutput(uri, optionsJSON, inputsJSON, output, filesJSON string) (out string, err error) {
	defer recoverTo(&err)
	ctx := context.Background()
	inputs, err := segment.ParseInfos([]byte(inputsJSON))
	if err != nil {
		return "", tagged(err)
	}
	var want []segment.File
	if filesJSON != "" {
		if err := decodeArg("files JSON", filesJSON, &want); err != nil {
			return "", err
		}
	}
	st, err := openStore(ctx, uri, optionsJSON)
	if err != nil {
		return "", tagged(err)
	}
	im, err := segment.VerifyOutput(ctx, st, inputs, output, want)
	if err != nil {
		return "", tagged(err)
	}
	return jsonReply(segment.DescribeWithStats(ctx, st, im))
}
