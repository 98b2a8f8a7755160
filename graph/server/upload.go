package server

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// uploadTransport is the GraphQL multipart request spec
// (https://github.com/jaydenseric/graphql-multipart-request-spec) for one
// file per request, streaming: unlike gqlgen's MultipartForm, which reads
// every file into memory or a temporary file before the operation runs, it
// runs the operation when it reaches the file's part and hands the part on
// as the Upload's File, so that the resolver reads the file as it arrives
// and no part of the orchestrator holds it whole. The parts must come in
// the spec's order: "operations", "map" (naming one file), the file.
// The File cannot seek; its Size is -1 (unknown). A body cut off before
// the file's end makes the File's Read fail (io.ErrUnexpectedEOF).
type uploadTransport struct{}

var _ graphql.Transport = uploadTransport{}

// uploadReadBuffer is the size of the reads of an upload's body.
const uploadReadBuffer = 256 << 10

// maxUploadFields bounds the "operations" and "map" parts.
const maxUploadFields = 64 << 10

func isMultipart(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && mt == "multipart/form-data"
}

// Supports implements graphql.Transport.
func (uploadTransport) Supports(r *http.Request) bool {
	return r.Method == http.MethodPost && r.Header.Get("Upgrade") == "" && isMultipart(r)
}

// partFile is a multipart part as an Upload's File: it reads, and cannot
// seek.
type partFile struct{ io.Reader }

func (partFile) Seek(int64, int) (int64, error) {
	return 0, errors.New("upload: the file streams and cannot seek")
}

// Do implements graphql.Transport.
func (uploadTransport) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	w.Header().Set("Content-Type", "application/json")
	start := graphql.Now()
	refuse := func(msg string) {
		w.WriteHeader(http.StatusUnprocessableEntity)
		_ = json.NewEncoder(w).Encode(graphql.Response{Errors: gqlerror.List{{Message: msg}}})
	}
	mt, ctParams, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" || ctParams["boundary"] == "" {
		refuse("upload: not a multipart body")
		return
	}
	// The multipart reader's own buffer is 4 KiB, and each of its reads
	// would be a read of the connection: read it in larger pieces.
	mr := multipart.NewReader(bufio.NewReaderSize(r.Body, uploadReadBuffer), ctParams["boundary"])
	part, err := mr.NextPart()
	if err != nil || part.FormName() != "operations" {
		refuse("upload: the first part must be operations")
		return
	}
	var params graphql.RawParams
	if err := json.NewDecoder(io.LimitReader(part, maxUploadFields)).Decode(&params); err != nil {
		refuse("upload: operations could not be decoded")
		return
	}
	part, err = mr.NextPart()
	if err != nil || part.FormName() != "map" {
		refuse("upload: the second part must be map")
		return
	}
	var files map[string][]string
	if err := json.NewDecoder(io.LimitReader(part, maxUploadFields)).Decode(&files); err != nil {
		refuse("upload: map could not be decoded")
		return
	}
	if len(files) > 1 {
		refuse("upload: a request carries at most one file")
		return
	}
	var file *multipart.Part
	for key, paths := range files {
		if file, err = mr.NextPart(); err != nil || file.FormName() != key {
			refuse("upload: the third part must be the file map names")
			return
		}
		if len(paths) != 1 {
			refuse("upload: the file must be named by one variable")
			return
		}
		up := graphql.Upload{File: partFile{file}, Size: -1, Filename: file.FileName(), ContentType: file.Header.Get("Content-Type")}
		if err := params.AddUpload(up, key, paths[0]); err != nil {
			w.WriteHeader(http.StatusUnprocessableEntity)
			_ = json.NewEncoder(w).Encode(graphql.Response{Errors: gqlerror.List{err}})
			return
		}
	}
	params.Headers = r.Header
	params.ReadTime = graphql.TraceTiming{Start: start, End: graphql.Now()}
	rc, gerr := exec.CreateOperationContext(r.Context(), &params)
	if gerr != nil {
		resp := exec.DispatchError(graphql.WithOperationContext(r.Context(), rc), gerr)
		w.WriteHeader(http.StatusUnprocessableEntity)
		_ = json.NewEncoder(w).Encode(resp)
		return
	}
	responses, ctx := exec.DispatchOperation(r.Context(), rc)
	_ = json.NewEncoder(w).Encode(responses(ctx))
}
