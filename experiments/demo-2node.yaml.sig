{
  "payloadType": "application/vnd.in-toto+json",
  "payload": "eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJwcmVkaWNhdGUiOnsia2l0IjoibWFuaWZlc3QifSwicHJlZGljYXRlVHlwZSI6InVybjpraXQ6bWFuaWZlc3QtYXBwcm92YWw6MSIsInN1YmplY3QiOlt7ImRpZ2VzdCI6eyJzaGEyNTYiOiJmNjQ1NTlhNTEwN2NhYjVjZTgwMTc2YWYxZTlkNzkwMTVmZDcxOGIwYjgxY2FhMTM3NDFjOWNlZDU5NDY2OTMzIn0sIm5hbWUiOiJkZW1vLTJub2RlLnlhbWwifV19",
  "signatures": [
    {
      "keyid": "SHA256:+7JblY1FdA9i3H5v5xHFp5RlvuS2IFBmP4Kwmrl738s",
      "sig": "Va1jOgT2vqZB5rN/4i+xfBta4W06QI446NgGJWNdVZ9TZpyCrdBOeoMqeQib1FA+bxEKs0VD0Yi5JDYSAvs4Cg==",
      "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE3lKu2Eaqir5Wi+R44pDwEuDfFJHlGGFKEXqIYwyP52 kit-example"
    }
  ]
}
