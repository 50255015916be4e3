/* The nine C entry points the TensorRT Python bindings link against, each returning null (or 0), so that the
   bindings import on a machine without TensorRT's libraries: every class, enum and signature is there, nothing
   that calls into TensorRT can run. Built once per library name (libnvinfer.so.N, libnvonnxparser.so.N,
   libnvinfer_plugin.so.N). */
void *createInferBuilder_INTERNAL(void *logger, int version) { return 0; }
void *createInferRuntime_INTERNAL(void *logger, int version) { return 0; }
void *createInferRefitter_INTERNAL(void *engine, void *logger, int version) { return 0; }
void *createNvOnnxParser_INTERNAL(void *network, void *logger, int version) { return 0; }
void *createNvOnnxParserRefitter_INTERNAL(void *refitter, void *logger, int version) { return 0; }
int getNvOnnxParserVersion(void) { return 0; }
void *getPluginRegistry(void) { return 0; }
void *getBuilderPluginRegistry(int capability) { return 0; }
int initLibNvInferPlugins(void *logger, const char *ns) { return 0; }
